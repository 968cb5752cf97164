"""What a platform team installs: the container image's inputs, the wheel, and the kustomize
manifests, each checked by the tool that would reject them (hadolint, pip, kubectl kustomize and
the Kubernetes JSON schemas). No image is built here: Docker may be missing."""
