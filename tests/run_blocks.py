"""Run several documentation blocks in this one interpreter, one after another.

``python tests/run_blocks.py BLOCKS.json RESULTS.json``: ``BLOCKS.json`` lists
``{"where": ..., "code": ..., "folder": ...}``; each block runs as a script would (its own
``__main__`` namespace, its own empty working folder), its printed output captured, and
``RESULTS.json`` gets ``{where: {"ok": bool, "stdout": str, "error": str}}``. TensorFlow and
Keras are imported once for all of them: the import is most of a small block's time.
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import sys
import traceback


def run_blocks(blocks: list[dict]) -> dict[str, dict]:
    results = {}
    for block in blocks:
        output = io.StringIO()
        os.chdir(block["folder"])
        # The block's source, where inspect (and so AutoGraph, converting a mapped function) looks
        # for it; without it inspect falls back on __main__'s loader and reads this file's lines.
        linecache.cache[block["where"]] = (
            len(block["code"]),
            None,
            block["code"].splitlines(keepends=True),
            block["where"],
        )
        try:
            with contextlib.redirect_stdout(output):
                exec(compile(block["code"], block["where"], "exec"), {"__name__": "__main__"})
        except BaseException:  # noqa: BLE001 (a block's failure is its result, not the run's)
            results[block["where"]] = {
                "ok": False,
                "stdout": output.getvalue(),
                "error": traceback.format_exc()[-3000:],
            }
        else:
            results[block["where"]] = {"ok": True, "stdout": output.getvalue(), "error": ""}
    return results


if __name__ == "__main__":
    blocks_path, results_path = sys.argv[1:3]
    with open(blocks_path, encoding="utf-8") as file:
        blocks = json.load(file)
    results = run_blocks(blocks)
    with open(results_path, "w", encoding="utf-8") as file:
        json.dump(results, file)
