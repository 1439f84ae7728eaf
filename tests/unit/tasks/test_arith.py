import pytest

from grpo.config import ArithConfig
from grpo.errors import ConfigError
from grpo.tasks.arith import ArithTask


def test_problems_are_deterministic_and_correct():
    task = ArithTask(ArithConfig(min_digits=2, max_digits=3, num_operands=3, ops=["+", "-", "*"], seed=3))
    again = ArithTask(ArithConfig(min_digits=2, max_digits=3, num_operands=3, ops=["+", "-", "*"], seed=3))
    for i in range(50):
        p = task.train_problem(i, seed=0)
        assert p == again.train_problem(i, seed=0)
        expression = p.question.removeprefix("What is ").removesuffix("?")
        assert int(p.gold) == eval(expression)  # precedence: 2 + 3 * 4 is 14


def test_train_and_held_out_problems_are_disjoint():
    task = ArithTask(ArithConfig())
    held_out = {p.question for p in task.eval_problems(128)}
    assert len(held_out) == 128  # distinct problems
    train = {task.train_problem(i, seed=s).question for s in range(3) for i in range(2000)}
    assert not held_out & train


def test_the_seed_changes_the_training_stream():
    task = ArithTask(ArithConfig())
    a = [task.train_problem(i, seed=0).question for i in range(20)]
    b = [task.train_problem(i, seed=1).question for i in range(20)]
    assert a != b


def test_digit_knobs_are_respected():
    task = ArithTask(ArithConfig(min_digits=1, max_digits=1))
    for i in range(100):
        a, _, b = task.train_problem(i, 0).question.removeprefix("What is ").removesuffix("?").split()
        assert 0 <= int(a) <= 9 and 0 <= int(b) <= 9


@pytest.mark.parametrize("cfg", [ArithConfig(ops=["/"]), ArithConfig(min_digits=3, max_digits=2),
                                 ArithConfig(num_operands=1), ArithConfig(ops=[])])
def test_bad_knobs_are_config_errors(cfg):
    with pytest.raises(ConfigError, match="task.arith"):
        ArithTask(cfg)
