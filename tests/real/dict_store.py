"""The run's key-value store (torch.distributed's TCPStore) in a dict, as the quota (real/run/stream.py) and the
move (real/run/migration.py) use it, for tests that play several workers in one process."""
from __future__ import annotations


class DictStore:
    def __init__(self):
        self.kv = {}

    def set(self, key, value):
        self.kv[key] = value.encode() if isinstance(value, str) else value

    def get(self, key):
        return self.kv[key]

    def check(self, keys):
        return all(k in self.kv for k in keys)

    def wait(self, keys):  # one process plays every worker: a key not there yet would never come
        assert self.check(keys), f"a wait that would never end: {keys}"

    def compare_set(self, key, expected, desired):
        if key not in self.kv and expected == "":
            self.set(key, desired)
        return self.kv[key]
