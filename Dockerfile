# The controller's image (docs/architecture.md, "Safety"): non-root, runs on a read-only root
# filesystem, no compilers. `make image` builds it. The builder installs the locked runtime
# dependencies (every version and hash pinned in requirements.lock) and the project's wheel into a
# virtualenv; the final stage is the same slim Python base with only that virtualenv copied in.
ARG PYTHON_IMAGE=python:3.11.17-slim-bookworm

FROM ${PYTHON_IMAGE} AS builder
# `pip` is the virtualenv's from here on (called by name, so the Dockerfile linter checks it).
ENV PATH=/opt/venv/bin:$PATH \
    PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
RUN python -m venv /opt/venv
# Dependencies first: this layer is reused while only the code changes. Wheels only, so nothing
# is compiled.
COPY requirements.lock ./
RUN pip install --no-cache-dir --require-hashes --only-binary=:all: -r requirements.lock
COPY pyproject.toml README.md ./
COPY autoscaler ./autoscaler
# The installers leave with the builder: the running image needs neither pip nor setuptools.
RUN pip wheel --no-cache-dir --no-deps --wheel-dir /src/dist . \
    && pip install --no-cache-dir --no-deps --no-index /src/dist/*.whl \
    && pip uninstall --yes pip setuptools

FROM ${PYTHON_IMAGE}
ARG VERSION=0.1.0
LABEL org.opencontainers.image.title="inference-autoscaler" \
      org.opencontainers.image.description="Kubernetes autoscaler for GPU model-serving Deployments" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.source="https://github.com/inference-autoscaler/inference-autoscaler" \
      org.opencontainers.image.licenses="Apache-2.0"
# Nothing is written at run time but under /tmp (an emptyDir in the manifests): no bytecode
# (pip compiled it in the builder), and HOME and matplotlib's cache point there.
# The loop is one thread: the BLAS and OpenMP pools numpy and scipy start would only spin on
# the node's other cores, which doubles the CPU a tick costs on a busy node. A fixed mmap
# threshold gives every block of 128 KiB or more back to the node when it is freed: glibc's
# moving threshold otherwise keeps the forecast history's answers, freed, in a heap that stays
# high (docs/benchmark.md, "Freed memory given back").
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    MPLCONFIGDIR=/tmp/matplotlib \
    OPENBLAS_NUM_THREADS=1 \
    OMP_NUM_THREADS=1 \
    MKL_NUM_THREADS=1 \
    MALLOC_MMAP_THRESHOLD_=131072
COPY --from=builder /opt/venv /opt/venv
WORKDIR /tmp
# The same numeric user as the Deployment's runAsUser; no account in /etc/passwd is needed.
USER 65532:65532
ENTRYPOINT ["autoscaler"]
CMD ["run"]
