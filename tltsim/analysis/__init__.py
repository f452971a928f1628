"""The analysis layer: what is made of `Result`s once they exist. Sim-vs-real validation (`validate`,
`work_domain`), speed calibration from a verl run (`calibration`), parameter sweeps (`sweep`), findings and
tables (`findings`, `table`, `export`), the HTML report (`report`) and its plots (`plots`). It reads the
records and runs the simulator; nothing below it imports it."""
