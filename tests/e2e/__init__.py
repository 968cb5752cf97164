"""End-to-end tests: the controller wired by `app`, the real clients, the API emulator and a
real Prometheus; time is a stepped clock the tests move."""
