"""Benchmark helpers with KvikIO's names (``kvikio.benchmarks``).

KvikIO ships its benchmark scripts in this package; gpufile's own benchmarks are the repository's
``benches/`` scripts and ``gpufile bench``. What is here is what scripts written for KvikIO's
benchmarks import: :mod:`gpufile.benchmarks.utils`.
"""
