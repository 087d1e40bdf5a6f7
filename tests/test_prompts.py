"""Prompt templates by family, and extracting the Lean answer from completions."""

import json
from pathlib import Path

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.prompts import (
    DEEPSEEK_INSTRUCTION,
    KIMINA_SYSTEM,
    answer_completion,
    build_prompt,
    extract_lean_block,
    kimina_messages,
    prompt_code,
    resolve_family,
)

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
FEW_SHOT = SHARED / "data" / "minif2f" / "minif2f_valid_few_shot_proofs.jsonl"
MINIF2F = SHARED / "data" / "minif2f" / "minif2f.jsonl"

PROBLEM = {
    "id": "mathd_algebra_478",
    "formal_statement": "theorem mathd_algebra_478 (b h v : ℝ) (h₀ : 0 < b ∧ 0 < h ∧ 0 < v) (h₁ : v = 1 / 3 * (b * h))\n"
                        "    (h₂ : b = 30) (h₃ : h = 13 / 2) : v = 65 := by\n",
    "header": DEFAULT_HEADER + "\n",
    "informal_statement": "The volume of a cone is given by the formula $V = \\frac{1}{3}Bh$. Show that it is 65.",
    "informal_prefix": "/-- The volume of a cone is given by the formula $V = \\frac{1}{3}Bh$. Show that it is 65.-/\n",
}


@pytest.fixture(scope="module")
def tokenizer():
    from prover_cli.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.mark.parametrize("name,family,expected", [
    ("AI-MO/Kimina-Prover-Preview-Distill-1.5B", "auto", "kimina"),
    ("deepseek-ai/DeepSeek-Prover-V1.5-RL", "auto", "deepseek"),
    ("tiny", "auto", "plain"),
    ("/models/Kimina-local", "auto", "kimina"),
    ("AI-MO/Kimina-Prover-Preview-Distill-1.5B", "plain", "plain"),   # explicit family wins
])
def test_resolve_family(name, family, expected):
    assert resolve_family(name, family) == expected


def test_kimina_template_matches_the_model_card(tokenizer):
    system, user = kimina_messages(PROBLEM)
    assert system == {"role": "system", "content": "You are an expert in mathematics and Lean 4."}
    assert user["role"] == "user"
    assert user["content"] == (
        "Think about and solve the following problem step by step in Lean 4.\n"
        f"# Problem:{PROBLEM['informal_statement']}\n"
        "# Formal statement:\n```lean4\n"
        f"{PROBLEM['header']}{PROBLEM['informal_prefix']}{PROBLEM['formal_statement']}\n```\n"
    )
    assert "v = 65 := by\n\n```" in user["content"]  # the statement ends at `:= by`, then the fence closes
    text = build_prompt(PROBLEM, tokenizer, "kimina")
    assert text.startswith(f"<|im_start|>system\n{KIMINA_SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_start|>assistant\n") and user["content"] in text


def test_kimina_without_chat_template_is_an_error(tokenizer):
    from prover_cli.errors import BackendError

    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        with pytest.raises(BackendError, match="chat template"):
            build_prompt(PROBLEM, tokenizer, "kimina")
    finally:
        tokenizer.chat_template = template


def test_deepseek_completion_prompt_and_bos(tokenizer):
    code = PROBLEM["header"] + PROBLEM["informal_prefix"] + PROBLEM["formal_statement"]
    assert prompt_code(PROBLEM, "deepseek") == code
    assert build_prompt(PROBLEM, tokenizer, "deepseek") == "Complete the following Lean 4 code:\n\n```lean4\n" + code
    assert tokenizer.bos_token is None  # Qwen-style: nothing to add
    tokenizer.bos_token = "<|endoftext|>"  # a LLaMA-style tokenizer (DeepSeek-Prover) has one
    try:
        assert build_prompt(PROBLEM, tokenizer, "deepseek") == "<|endoftext|>" + DEEPSEEK_INSTRUCTION + code
    finally:
        tokenizer.bos_token = None


def test_plain_prompt_is_the_statement_and_auto_reads_the_tokenizer_name(tokenizer):
    assert build_prompt(PROBLEM, tokenizer, "plain") == PROBLEM["formal_statement"]
    assert build_prompt(PROBLEM, None, "auto") == PROBLEM["formal_statement"]


# -- extraction -------------------------------------------------------------------------------

def test_last_of_several_blocks_is_the_answer():
    text = ("First try:\n```lean4\ntheorem a : 1 = 1 := by\n  simp\n```\nHmm, better:\n"
            "```lean\ntheorem a : 1 = 1 := by\n  rfl\n```\nDone.")
    assert extract_lean_block(text) == "theorem a : 1 = 1 := by\n  rfl"


def test_no_block_and_other_languages_give_none():
    assert extract_lean_block("theorem a : 1 = 1 := by rfl") is None
    assert extract_lean_block("```python\nprint(1)\n```\n```\nplain fence\n```") is None
    assert extract_lean_block("") is None


def test_unterminated_block_is_not_an_answer():
    assert extract_lean_block("```lean4\ntheorem a : 1 = 1 := by\n  rf") is None
    # a finished block before a cut-off one is still the last *complete* answer
    text = "```lean4\ntheorem a : 1 = 1 := by\n  rfl\n```\nAgain:\n```lean4\ntheorem a : 1 = 1 := by\n  si"
    assert extract_lean_block(text) == "theorem a : 1 = 1 := by\n  rfl"
    # a block re-opened before the first closed: the first never ended
    assert extract_lean_block("```lean4\nbroken\n```lean4\ntheorem b : True := by\n  trivial\n```") == \
        "theorem b : True := by\n  trivial"


def test_code_inside_think_is_not_the_answer():
    thinking = "<think>\nLet me try:\n```lean4\ntheorem a : 1 = 1 := by\n  sorry\n```\n"
    assert extract_lean_block(thinking) is None  # still thinking when the tokens ran out
    assert extract_lean_block(thinking + "</think>\nNo final answer.") is None
    answer = thinking + "</think>\nFinal:\n```lean4\ntheorem a : 1 = 1 := by\n  rfl\n```\n"
    assert extract_lean_block(answer) == "theorem a : 1 = 1 := by\n  rfl"
    # templates that open <think> in the prompt: the completion has only the closing tag
    assert extract_lean_block("draft ```lean4\nx\n```\n</think>\n```lean4\ny\n```") == "y"


def test_closing_fence_glued_to_code_and_crlf():
    assert extract_lean_block("```lean4\ntheorem a : True := by trivial```") == "theorem a : True := by trivial"
    assert extract_lean_block("```lean4\r\ntheorem a : True := by\r\n  trivial\r\n```\r\n") == \
        "theorem a : True := by\n  trivial"


def test_continuation_answers_cut_at_the_first_fence_and_wrap_in_a_block():
    completion = "  norm_num [h₁, h₂, h₃]\n```\nThe proof uses ```lean4\ntheorem fake : False := by sorry\n```"
    stored = answer_completion(PROBLEM, completion, "deepseek")
    assert stored.startswith("```lean4\n") and stored.endswith("\n```\n")
    assert extract_lean_block(stored) == prompt_code(PROBLEM, "deepseek") + "  norm_num [h₁, h₂, h₃]"
    # a completion with no closing fence keeps everything (the model ran out of tokens)
    assert extract_lean_block(answer_completion(PROBLEM, "  linarith", "plain")) == \
        PROBLEM["formal_statement"] + "  linarith"
    # chat families keep their text as written
    assert answer_completion(PROBLEM, "<think>x</think>\n```lean4\ny\n```", "kimina") == \
        "<think>x</think>\n```lean4\ny\n```"


@pytest.mark.skipif(not FEW_SHOT.exists(), reason="../shared/data is not present")
def test_real_minif2f_proofs_round_trip_through_the_deepseek_path():
    statements = {json.loads(line)["name"]: json.loads(line) for line in MINIF2F.read_text(encoding="utf-8").splitlines()}
    rows = [json.loads(line) for line in FEW_SHOT.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 67
    for row in rows:
        problem = {"id": row["name"], "formal_statement": row["formal_statement"],
                   "header": statements[row["name"]]["header"], "informal_prefix": row["informal_prefix"]}
        completion = row["formal_proof"] + "\n```\nThis closes the goal."
        code = extract_lean_block(answer_completion(problem, completion, "deepseek"))
        expected = problem["header"] + row["informal_prefix"] + row["formal_statement"] + row["formal_proof"]
        assert code == expected.rstrip()
        assert row["formal_statement"] in code
