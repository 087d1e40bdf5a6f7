"""prover: train Lean 4 theorem provers with Evolution Strategies and GRPO.

The module tree, one line per file, is README.md's Layout section (tests/test_readme_layout.py
keeps it complete); each subpackage's __init__.py lists its own modules
(tests/test_package_indexes.py).
"""

__version__ = "0.1.0"
