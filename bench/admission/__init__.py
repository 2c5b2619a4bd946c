"""The admission benchmarks: fairness between tenants (``python -m bench.admission.fairness``,
``make bench-fairness``) and overload shedding (``python -m bench.admission.overload``,
``make bench-overload``). Each starts private stacks of its own and writes its results
into ``bench/results/``."""
