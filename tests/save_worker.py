"""A process that saves checkpoints on command, for tests/test_save_concurrency.py: the test
starts two, then tells both to save into one directory at the same moment, trial after trial.

Usage: save_worker.py KIND DIRECTORY [MAX_SHARD_SIZE]
KIND: "safetensors" (gpufile.safetensors.save_checkpoint of 12 NumPy arrays of 1 MiB) or "dcp"
(torch.distributed.checkpoint.save with gpufile.torch.FileSystemWriter, no process group).
Reads "save VALUE" lines from stdin (every tensor filled with VALUE), answers "ok" or
"error: ..." on one line each; ends at EOF.
"""

import sys

import numpy as np

N_TENSORS = 12
ELEMS = (1 << 20) // 4  # 1 MiB of float32


def main() -> None:
    kind, directory = sys.argv[1], sys.argv[2]
    if kind == "safetensors":
        import gpufile.safetensors as gs

        limit = sys.argv[3]

        def save(value: float) -> None:
            gs.save_checkpoint({f"t{i:02d}": np.full(ELEMS, value, np.float32)
                                for i in range(N_TENSORS)}, directory, limit)
    else:
        import warnings

        import torch
        import torch.distributed.checkpoint as dcp

        import gpufile.torch as gt

        warnings.simplefilter("ignore")

        def save(value: float) -> None:
            sd = {f"t{i:02d}": torch.full((ELEMS,), value) for i in range(N_TENSORS)}
            dcp.save(sd, storage_writer=gt.FileSystemWriter(directory))
    print("ready", flush=True)
    for line in sys.stdin:
        value = float(line.split()[1])
        try:
            save(value)
            print("ok", flush=True)
        except Exception as e:  # reported to the test, which fails on it
            print(f"error: {type(e).__name__}: {e}".replace("\n", " "), flush=True)


if __name__ == "__main__":
    main()
