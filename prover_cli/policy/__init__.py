"""The policy: the model being trained, how it is loaded, prompted and sampled.

Modules (tests/test_package_indexes.py keeps this list complete):

- samplers/         one signature for transformers (CPU/GPU default) and vLLM (GPU extra), per-prompt seeds
- rollout.py        sample completions and score them through the task: everyone's one path
- prompts.py        prompt families byte for byte with upstream; extraction from the response only
- model_dir.py      a model directory checked file by file before loading; weights compared and
                    fingerprinted; config.json's dtype (generic: ES, GRPO, held-out, samplers)
- tiny_model.py     the offline tiny model and tokenizer
- warmstart.py      the demo's base policy: the tiny model warm-started on countdown, cached
- built_models.py   `model.name` -> path: `tiny` and `tiny-countdown` built offline, others as is

Nothing here imports torch, transformers or vLLM at import time: `prover --help` stays light.
"""
