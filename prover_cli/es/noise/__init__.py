"""ES member noise, bit-identical on every device (docs/ledger.md).

Modules (tests/test_package_indexes.py keeps this list complete):

- `full.py`: device-independent noise on every weight (integer counter hash, Irwin-Hall) and the
  exact fp32 arithmetic that applies it: a fused path where one applies, else the eager definition.
- `definition.py`: the definition the fused paths (es/fused_cpu.py, es/fused_gpu.py) are checked
  against (constants, the pure-Python reference, the eager torch ops); below full.py.
- `lowrank.py`: low-rank member noise (`es.noise = "lowrank"`, `"lora"`): A B^T/sqrt(r) with A and B
  from the member's seed through the same integer-hash noise, and its fp32 update.
"""
