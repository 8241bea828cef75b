"""The programs of ``foreign/`` (``test_foreign.py`` says how they are
written) whose jitted functions take or read PRNG keys, typed
(``random.key``) or legacy (``random.PRNGKey``): the same output as
python's, cold and warm, and what ppy stages of them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import models
from tests.record.test_foreign import staged_calls

pytestmark = pytest.mark.slow

#: Per program, the calls served staged, by function.
STAGED = {
    # run_epoch takes a typed PRNG key; evaluate reads one, compared by its
    # key data.
    "tiny_vae": {"run_epoch": 3, "evaluate": 3},
    # private_update takes a typed PRNG key, and its trace reads absl's FLAGS,
    # compared by their parsed values.
    "private_sgd": {"main.<locals>.private_update": 9, "main.<locals>.evaluate": 3},
    # update takes a legacy uint32 key, sample_mean a typed one; negative_elbo's
    # plain calls (under grad, jit's gradient: no staged-vjp). grid_mass takes
    # a lambda written in the call as a static argument, made anew by each
    # call, and served by its fingerprint.
    "variational_fit": {
        "main.<locals>.update": 20,
        "sample_mean": 2,
        "negative_elbo": 2,
        "grid_mass": 3,
    },
}

#: absl, which private_sgd reads its flags with, comes with optax: the quick
#: session, which installs no model library, has none.
NEEDS_ABSL = {"private_sgd"}


@pytest.mark.parametrize(
    "program",
    [pytest.param(p, marks=models) if p in NEEDS_ABSL else p for p in sorted(STAGED)],
)
def test_a_program_that_uses_prng_keys_is_recorded_and_run_with_the_same_output(
    tmp_path: Path, program: str
) -> None:
    assert staged_calls(tmp_path, program) == STAGED[program]
