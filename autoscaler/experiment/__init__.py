"""Every policy replayed on the same trace: the equal-SLO comparison as a library.

`scenario` holds a trace to replay (per-second arrivals, and where its load steps up),
`sweep` runs every policy on it through the real loop on the simulator and searches each one's
utilisation target (`equal_slo`) for the cheapest setting within the SLO, and `report` renders
the results as a table, JSON and plots. `whatif` is `autoscaler bench --trace`: one user trace,
one start-up regime, one table and one plot. The full benchmark (`bench/`, outside the package)
builds its scenarios and calls the same code.

It must not change the simulator or the policies: it only chooses their inputs and reads their
results. It never touches a cluster: no adapters, no `app`.
"""
