"""Two of jax's own examples whose jitted functions take or read typed PRNG
keys, recorded as written (``test_foreign.py`` says how the programs were
made): the same output as python's, cold and warm, and what ppy stages."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.record.test_foreign import staged_calls

pytestmark = pytest.mark.slow

#: Per program, the calls served staged, by function.
STAGED = {
    # run_epoch takes a typed PRNG key (random.key), which ppy does not stage
    # (docs/limitations.md); evaluate reads one, compared by its key data.
    "mnist_vae": {"evaluate": 2},
    # private_update takes a typed PRNG key, and reads absl flags;
    # update is not called without --dpsgd=False.
    "differentially_private_sgd": {},
}


@pytest.mark.parametrize("program", sorted(STAGED))
def test_a_program_that_uses_prng_keys_is_recorded_and_run_with_the_same_output(
    tmp_path: Path, program: str
) -> None:
    assert staged_calls(tmp_path, program) == STAGED[program]
