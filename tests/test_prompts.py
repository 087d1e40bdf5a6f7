"""Prompt templates by family, and extracting the Lean answer from completions."""

import json

import pytest

from prover_cli.config import DEFAULT_HEADER
from prover_cli.policy.prompts import (
    DEEPSEEK_HEADER,
    DEEPSEEK_INSTRUCTION,
    FAMILIES,
    KIMINA_SYSTEM,
    answer_completion,
    build_prompt,
    chat_messages,
    continuation_prompt,
    extract_lean_block,
    family_choice,
    family_header,
    kimina_messages,
    prompt_code,
    resolve_family,
)


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
    from prover_cli.policy.tiny_model import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.mark.parametrize("name,expected", [
    ("AI-MO/Kimina-Prover-Preview-Distill-1.5B", "kimina-preview"),
    ("AI-MO/Kimina-Prover-Preview-Distill-7B", "kimina-preview"),
    ("AI-MO/Kimina-Prover-Distill-8B", "kimina-prover"),
    ("AI-MO/Kimina-Prover-RL-1.7B", "kimina-prover"),
    ("AI-MO/Kimina-Prover-72B", "kimina-prover"),
    ("deepseek-ai/DeepSeek-Prover-V1.5-RL", "deepseek-v1.5-cot"),
    ("deepseek-ai/DeepSeek-Prover-V1.5-SFT", "deepseek-v1.5-cot"),
    ("deepseek-ai/DeepSeek-Prover-V1.5-Base", "deepseek-v1.5"),
    ("deepseek-ai/DeepSeek-Prover-V2-7B", "deepseek-v2"),
    ("Goedel-LM/Goedel-Prover-SFT", "goedel-v1"),
    ("Goedel-LM/Goedel-Prover-DPO", "goedel-v1"),
    ("Goedel-LM/Goedel-Prover-V2-8B", "goedel-v2"),
    ("/models/goedel-prover-v2-32b", "goedel-v2"),
])
def test_auto_maps_known_models_and_says_which(name, expected):
    family, note = family_choice(name, "auto")
    assert family == expected
    assert note == f"model.family = auto: `{expected}` prompts for {name!r}"
    assert resolve_family(name, "auto") == expected


def test_auto_warns_on_unknown_names_and_explicit_families_win():
    family, note = family_choice("Qwen/Qwen2.5-Math-1.5B", "auto")
    assert family == "plain" and note.startswith("warning:") and "falling back to `plain`" in note
    logged = []
    reporter = type("R", (), {"log": lambda self, message: logged.append(message)})()
    assert resolve_family("Qwen/Qwen2.5-Math-1.5B", "auto", reporter=reporter) == "plain"
    assert logged == [note]
    assert family_choice("tiny", "auto") == ("plain", None)  # our test model: plain by design
    assert family_choice("AI-MO/Kimina-Prover-Preview-Distill-1.5B", "plain") == ("plain", None)
    assert resolve_family("x", "kimina") == "kimina-preview" and resolve_family("x", "deepseek") == "deepseek-v1.5"
    from prover_cli.errors import ConfigError

    with pytest.raises(ConfigError, match="model.family = 'nope'"):
        resolve_family("x", "nope")


def test_config_accepts_every_family():
    from prover_cli.config import config_from_dict

    for family in ("auto", *FAMILIES, "kimina", "deepseek"):
        assert config_from_dict({"model": {"family": family}}).model.family == family


def test_every_published_family_defaults_to_deepseeks_evaluation_header():
    assert DEEPSEEK_HEADER == "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"
    assert all(family_header(f) == DEEPSEEK_HEADER for f in FAMILIES if f != "plain")
    assert family_header("plain") is None


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
    text = build_prompt(PROBLEM, tokenizer, "kimina-preview")
    assert build_prompt(PROBLEM, tokenizer, "kimina") == text  # the old name is an alias
    assert text.startswith(f"<|im_start|>system\n{KIMINA_SYSTEM}<|im_end|>\n<|im_start|>user\n")
    assert text.endswith("<|im_start|>assistant\n") and user["content"] in text


def test_kimina_without_chat_template_is_an_error(tokenizer):
    from prover_cli.errors import BackendError

    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        for family in ("kimina", "kimina-prover", "deepseek-v2", "deepseek-v2-noncot", "goedel-v2"):
            with pytest.raises(BackendError, match="chat template"):
                build_prompt(PROBLEM, tokenizer, family)
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
    # only the response is read: the trusted statement + the model's text; the prompt is not echoed
    assert extract_lean_block(stored) == PROBLEM["formal_statement"] + "  norm_num [h₁, h₂, h₃]"
    for family in ("deepseek-v1.5", "deepseek-v1.5-cot", "goedel-v1", "plain"):
        assert answer_completion(PROBLEM, completion, family) == stored
    # a completion with no closing fence keeps everything (the model ran out of tokens)
    assert extract_lean_block(answer_completion(PROBLEM, "  linarith", "plain")) == \
        PROBLEM["formal_statement"] + "  linarith"
    # chat families keep their text as written
    for family in ("kimina", "kimina-prover", "deepseek-v2", "goedel-v2"):
        assert answer_completion(PROBLEM, "<think>x</think>\n```lean4\ny\n```", family) == \
            "<think>x</think>\n```lean4\ny\n```"


def test_fences_in_the_problem_text_cannot_break_the_answer():
    """MOBench Imo2008P2a/b carry ``` fences in their informal prefix: the answer ignores the prompt."""
    problem = {**PROBLEM, "informal_prefix": "/-!\n(a) Prove that\n          ```\n          x ≥ 1\n          ```\n-/\n"}
    assert "```" in build_prompt(problem, None, "deepseek-v1.5")  # the prompt carries the fence, as upstream's does
    for family in ("deepseek-v1.5", "deepseek-v1.5-cot", "goedel-v1"):
        stored = answer_completion(problem, "  nlinarith [sq_nonneg x]\n```", family)
        assert extract_lean_block(stored) == problem["formal_statement"] + "  nlinarith [sq_nonneg x]"


def test_real_minif2f_proofs_round_trip_through_the_deepseek_path(shared):
    FEW_SHOT = shared("data", "minif2f", "minif2f_valid_few_shot_proofs.jsonl")
    MINIF2F = shared("data", "minif2f", "minif2f.jsonl")
    statements = {json.loads(line)["name"]: json.loads(line) for line in MINIF2F.read_text(encoding="utf-8").splitlines()}
    rows = [json.loads(line) for line in FEW_SHOT.read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 67
    for row in rows:
        problem = {"id": row["name"], "formal_statement": row["formal_statement"],
                   "header": statements[row["name"]]["header"], "informal_prefix": row["informal_prefix"]}
        completion = row["formal_proof"] + "\n```\nThis closes the goal."
        code = extract_lean_block(answer_completion(problem, completion, "deepseek"))
        expected = row["formal_statement"] + row["formal_proof"]
        assert code == expected.rstrip()
        assert row["formal_statement"] in code


# -- each family's exact upstream text (written out literally, not rebuilt from our constants) ---

CARD = {  # the DeepSeek-Prover-V2 README's example problem, as prepare-data stores it
    "id": "mathd_algebra_10",
    "header": "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n",
    "informal_prefix": "/-- What is the positive difference between $120\\%$ of 30 and $130\\%$ of 20? Show that it is 10.-/\n",
    "formal_statement": "theorem mathd_algebra_10 : abs ((120 : ℝ) / 100 * 30 - 130 / 100 * 20) = 10 := by\n",
    "informal_statement": "What is the positive difference between $120\\%$ of 30 and $130\\%$ of 20? Show that it is 10.",
}
CARD_CODE = (
    "import Mathlib\nimport Aesop\n\nset_option maxHeartbeats 0\n\nopen BigOperators Real Nat Topology Rat\n\n"
    "/-- What is the positive difference between $120\\%$ of 30 and $130\\%$ of 20? Show that it is 10.-/\n"
    "theorem mathd_algebra_10 : abs ((120 : ℝ) / 100 * 30 - 130 / 100 * 20) = 10 := by"
)
PLAN = ("Before producing the Lean 4 code to formally prove the given theorem, provide a detailed proof plan "
        "outlining the main proof steps and strategies.\n"
        "The plan should highlight key ideas, intermediate lemmas, and proof structures that will guide the "
        "construction of the final formal proof.")


def test_deepseek_v15_non_cot_and_cot_are_prover_utils_byte_for_byte():
    # DeepSeek-Prover-V1.5 prover/utils.py: non_cot_prompt / cot_prompt
    assert continuation_prompt(CARD, "deepseek-v1.5") == "Complete the following Lean 4 code:\n\n```lean4\n" + CARD_CODE + "\n"
    cot = ("Complete the following Lean 4 code with explanatory comments preceding each line of code:\n\n```lean4\n"
           + CARD_CODE + "\n")
    assert continuation_prompt(CARD, "deepseek-v1.5-cot") == cot
    # Goedel-Prover eval/step1_inference.py formats the same CoT text
    assert continuation_prompt(CARD, "goedel-v1") == cot


def test_deepseek_v2_cot_is_the_readme_quick_start_byte_for_byte():
    # README: formal_statement.strip() ending `:= by\n  sorry`, prompt.format(...).strip()
    (user,) = chat_messages(CARD, "deepseek-v2")
    assert user == {"role": "user", "content":
                    "Complete the following Lean 4 code:\n\n```lean4\n" + CARD_CODE + "\n  sorry\n```\n\n" + PLAN}


def test_deepseek_v2_non_cot_is_the_papers_appendix_a1():
    (user,) = chat_messages(CARD, "deepseek-v2-noncot")
    assert user == {"role": "user", "content": "Complete the following Lean 4 code:\n\n```lean4\n" + CARD_CODE + "\n  sorry\n```"}


def test_goedel_v2_is_its_inference_handler_byte_for_byte():
    # src/utils.py DeepSeekCoTHandler: lean4_code.split(":= by")[0] + ":= by sorry", then "{code}```"
    (user,) = chat_messages(CARD, "goedel-v2")
    assert user == {"role": "user", "content":
                    "Complete the following Lean 4 code:\n\n```lean4\n" + CARD_CODE + " sorry```\n\n" + PLAN}


def test_kimina_preview_is_the_model_card_byte_for_byte():
    system, user = chat_messages(CARD, "kimina-preview")
    assert system == {"role": "system", "content": "You are an expert in mathematics and Lean 4."}
    assert user["content"] == (
        "Think about and solve the following problem step by step in Lean 4.\n"
        "# Problem:What is the positive difference between $120\\%$ of 30 and $130\\%$ of 20? Show that it is 10.\n"
        "# Formal statement:\n```lean4\n" + CARD_CODE + "\n\n```\n")


def test_kimina_prover_is_the_rl_recipes_prompt_byte_for_byte():
    # project-numina/kimina-prover-rl: SYSTEM_PROMPT and PROMPT.format(informal_problem=..., formal_statement=...)
    system, user = chat_messages(CARD, "kimina-prover")
    assert system == {"role": "system", "content": "You are an expert in mathematics and proving theorems in Lean 4."}
    assert user["content"] == (
        "Think about and solve the following problems step by step in Lean 4.\n\n# Problem:\n"
        "What is the positive difference between $120\\%$ of 30 and $130\\%$ of 20? Show that it is 10.\n\n"
        "# Formal Statement:\n```lean4\n" + CARD_CODE + " sorry\n```\n")


def test_chat_families_go_through_the_tokenizers_template(tokenizer):
    for family in ("deepseek-v2", "deepseek-v2-noncot", "goedel-v2", "kimina-preview", "kimina-prover"):
        text = build_prompt(CARD, tokenizer, family)
        assert text.endswith("<|im_start|>assistant\n")
        assert chat_messages(CARD, family)[-1]["content"] in text


def test_term_mode_statements_get_sorry_after_the_colon_equals():
    term = {**CARD, "formal_statement": "theorem t (x : ℕ) : x = x :=\n"}
    (user,) = chat_messages(term, "goedel-v2")
    assert "theorem t (x : ℕ) : x = x := sorry```" in user["content"]
    assert extract_lean_block(answer_completion(term, "  rfl\n```", "deepseek-v1.5")) == "theorem t (x : ℕ) : x = x :=\n  rfl"


def test_a_fence_inside_a_lean_comment_does_not_end_the_block():
    """A chat model restating MOBench Imo2008P2a (``` inside its doc comment) keeps its whole file."""
    restated = ("/-!\n# International Mathematical Olympiad 2008, Problem 2\n(a) Prove that\n          ```\n"
                "          x^2 / (x-1)^2 ≥ 1\n          ```\nfor all real numbers.\n-/\n"
                "theorem imo2008_p2a (x : ℝ) : x ^ 2 ≥ 0 := by\n  positivity")
    completion = "<think>plan</think>\nHere it is:\n```lean4\n" + restated + "\n```\nDone."
    assert extract_lean_block(completion) == restated
    # nested comments, line comments and strings hide comment markers as Lean's lexer does
    code = "/- outer /- inner -/ still ```\n-/\n-- a line comment /- not opened\ndef s := \"/-\"\ntheorem t : True := trivial"
    assert extract_lean_block("```lean4\n" + code + "\n```") == code
    # a comment that never closes: fences count wherever they are, as before (verify's lexer then rejects it)
    assert extract_lean_block("```lean4\ntheorem t : True := by\n  /- unfinished\n  trivial\n```\n") == \
        "theorem t : True := by\n  /- unfinished\n  trivial"
    assert extract_lean_block("```lean4\ntheorem t : True := by\n/--junk```\n") == "theorem t : True := by\n/--junk"


def test_an_earlier_draft_never_stands_in_for_a_broken_last_answer():
    text = ("```lean4\ntheorem t : True := by\n  trivial\n```\nBetter:\n"
            "```lean4\ntheorem t : True := by\n  /- oops\n  exact True.intro\n```\n")
    assert extract_lean_block(text) == "theorem t : True := by\n  /- oops\n  exact True.intro"
