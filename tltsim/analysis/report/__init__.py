"""What a user reads: the HTML report, its findings and tuning advice, the CLI's tables, the plots, the Perfetto export."""
