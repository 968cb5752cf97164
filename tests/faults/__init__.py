"""The fault-injection suite (`make faults`): the controller under hostile input and bad days.

Outside the default `make test` (it is long); every test here is marked `faults`. Each test
records the figures it measured with the `figures` fixture; at the end of the session they are
written to `faults-out/` as JSON and printed as Markdown tables, which `docs/reliability.md`
quotes.
"""
