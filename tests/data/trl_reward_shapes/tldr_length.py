"""A length reward in the shape of TRL's quickstart `reward_len`, as https://github.com/ludolara/ds2d
(src/grpo/test_train_grpo.py, commit 3b5ef24f) runs it on trl-lib/tldr: text prompts, completions as strings,
a `completion` column in the data that TRL does not pass, and ints returned rather than floats. Modelled on
that function; written here, not copied."""

from __future__ import annotations

TARGET_CHARS = 20


def near_twenty_chars_reward(completions, **kwargs) -> list[int]:
    """Minus one per character the summary, stripped, is away from TARGET_CHARS."""
    return [-abs(len(text.strip()) - TARGET_CHARS) for text in completions]
