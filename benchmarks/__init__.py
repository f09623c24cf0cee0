"""Camillo's benchmark suite: figures for a vault of 10k, 100k or 1M records, each beside its floor.

Run it with ``bash scripts/bench --records 10000`` (or ``python -m benchmarks``); see
``docs/benchmarks.md`` for what every figure means and how the floor (the bare crypto an operation
cannot avoid, timed on the same machine in the same run) is computed.

Modules: :mod:`~benchmarks.cli` (the command), :mod:`~benchmarks.corpus` (reproducible, cached
vaults built with :mod:`camillo.demo`), :mod:`~benchmarks.ops` and :mod:`~benchmarks.child` (each
measured operation runs in a fresh subprocess, which also gives its peak RSS),
:mod:`~benchmarks.floor` (primitive timings and floor formulas), :mod:`~benchmarks.gui` (the desktop
app under ``QT_QPA_PLATFORM=offscreen``), :mod:`~benchmarks.vaultmem_cmp` (the VaultMem comparison)
and :mod:`~benchmarks.report` (JSON, Markdown and the PNG plot).

Everything here is single-threaded and runs on the main thread of its own process, except
:mod:`benchmarks.gui`, which runs the desktop app's GUI thread and its vault worker thread.
"""
