"""End-to-end tests of Berth on a real Kubernetes control plane (see e2e/README.md)."""
