"""`bench-build status`: a build's progress from its ledger alone (no Ray, no source)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench_build.build.ledger import Ledger, entry_key
from bench_build.build.run import build_fingerprint
from bench_build.errors import UsageError
from bench_build.format.writer import ENCODINGS
from bench_build.manifests.manifest import MANIFEST_NAME
from bench_build.manifests.recipe import load_recipe, refuse_output_folder
from bench_build.plan.tasks import TaskSpec, plan_shards, task_groups
from bench_build.storage import LocalStore, open_store


def recipe_fingerprints(recipe: Any, info: dict[str, Any]) -> dict[str, str]:
    """The build fingerprints `run` computes for ``recipe`` over the frames and shard size the ledger's run.json
    records, one per encoding (run.json does not record the encoding; `run --encoding` chooses it)."""
    return {enc: build_fingerprint(recipe, list(info["frames"]), frames_per_shard=info["frames_per_shard"],
                                   encoding=enc) for enc in ENCODINGS}


def build_status(benchmark: str, out: str | Path, *, endpoint_url: str | None = None,
                 profile: str | None = None, recheck: str = "size") -> dict[str, Any]:
    """Shards done / failed / pending, examples written and an ETA, from the ledger alone.

    ``matches_recipe`` says whether the build there is this recipe's (its fingerprint is the one `run` computes for
    the recipe over the ledger's frames and shard size, in either encoding); when it is not, `run` with this recipe
    refuses the folder, and ``recipe_fingerprint`` is the fingerprint `run` would have (full encoding).

    A task whose entry says done but whose files are not as it recorded them (one deleted, or of another size:
    checked against one listing of the version, never a read or a HEAD per file; with ``recheck="sha256"`` also
    one whose bytes changed, reading every file as `run` does) is not counted done but ``rebuild`` ({task: why}):
    `run` checks every done task's files and builds such a task again."""
    refuse_output_folder(Path(benchmark), "status")
    recipe = load_recipe(benchmark)
    store = open_store(out, endpoint_url=endpoint_url, profile=profile).child(f"{recipe.name}/{recipe.version}")
    version_dir = store.root if isinstance(store, LocalStore) else store.url
    if isinstance(store, LocalStore):  # --out a file (or under one): said as such, not as a traceback
        store.refuse_non_directory("the version directory under --out,")
    ledger = Ledger(store)
    ledger.refuse_blocked()  # else every task would read as pending: no entry can be there
    info = ledger.run_info(full=True)  # a damaged or hand-edited run.json: LedgerUnreadable naming the key
    if info is None:
        raise UsageError(f"{version_dir}: no build here (no _ledger/run.json)")
    mine = recipe_fingerprints(recipe, info)
    matches = info["fingerprint"] in mine.values()
    cut = task_groups(recipe, info["frames_per_shard"], None, info, info["fingerprint"], False)
    specs = [TaskSpec(s, g, len(cut), parts) for s in plan_shards(info["frames"], info["frames_per_shard"])
             for g, parts in enumerate(cut)]
    done, failed, kinds, pending, rebuild = [], {}, {}, [], {}
    seconds, examples = 0.0, 0
    sizes = ledger.object_sizes()  # one listing: the failed entries, and the size of every file a done task lists
    for s in specs:
        e = ledger.done_entry(s.name)
        if entry_key(s.name, failed=True) in sizes:  # a failed entry wins, as in `run`
            if (fe := ledger.failed_entry(s.name)) is not None:
                failed[s.name] = fe["error"]
                kinds[s.name] = fe.get("kind", "input")
            else:  # unreadable (said on stderr): `run` builds the task again
                pending.append(s.name)
        elif e and e.get("fingerprint") == info["fingerprint"]:
            if why := ledger.files_problem(e, sizes, recheck):
                rebuild[s.name] = why
                pending.append(s.name)
                continue
            done.append(s.name)
            seconds += e["seconds"]
            examples += sum(f["rows"] for f in e["files"])
        else:
            pending.append(s.name)
    remaining = len(specs) - len(done)
    eta = (seconds / len(done)) * remaining if done else None
    # "shards" counts the ledger's tasks (as `run`'s summary line): blocks × "task_groups" per block
    return {"version_dir": str(version_dir), "fingerprint": info["fingerprint"], "matches_recipe": matches,
            "recipe_fingerprint": info["fingerprint"] if matches else mine["full"],
            "shards": len(specs),
            "task_groups": len(cut),
            "done": len(done), "failed": failed, "failed_kinds": kinds, "pending": len(pending), "rebuild": rebuild,
            "examples_written": examples,
            "examples_total": len(info["frames"]) * (1 + len(info["recipe"]["corruptions"])
                                                      * info["recipe"]["severities"]),
            "eta_cpu_seconds": eta, "complete": MANIFEST_NAME in sizes}
