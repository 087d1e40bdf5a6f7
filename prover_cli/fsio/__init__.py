"""File IO: how the package reads and writes its files, kill -9 and a second writer included.

Modules (tests/test_package_indexes.py keeps this list complete):

- jsonl.py   JSONL read line by line (bad lines reported, the rest kept); resumable writing; the
             only two atomic writers (a file, a directory), one durability rule
- lock.py    one writer per run directory and --out (an flock beside the target and on it)
"""
