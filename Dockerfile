# syntax=docker/dockerfile:1.7
# The Berth image: `berth serve` (webhook + controller) and `berth agent` (GPU node agent).
# Small: python slim, no compilers in the final stage, wheels only. Non-root (65532). Every
# Python dependency pinned (the constraints below are the full runtime closure; regenerate them
# from a fresh `pip install .` with `pip freeze --exclude berth` when bumping).

ARG PYTHON=python:3.11.11-slim-bookworm

FROM ${PYTHON} AS build
WORKDIR /src
COPY <<EOF /tmp/constraints.txt
absl-py==2.5.1
aiohappyeyeballs==2.7.1
aiohttp==3.14.5
aiohttp-retry==2.9.1
aiosignal==1.4.0
annotated-types==0.7.0
attrs==26.1.0
certifi==2026.5.20
cffi==2.0.0
charset-normalizer==3.4.7
contourpy==1.3.3
cryptography==48.0.0
cycler==0.12.1
durationpy==0.11
fonttools==4.68.0
frozenlist==1.8.0
idna==3.13
immutabledict==4.3.1
kiwisolver==1.5.1
kubernetes==37.0.2
markdown-it-py==4.3.0
matplotlib==3.11.2
mdurl==0.1.2
multidict==7.2.1
numpy==2.4.6
nvidia-ml-py==13.615.71
oauthlib==4.0.1
ortools==9.15.6755
packaging==26.4
pandas==3.1.1
pillow==13.0.0
prometheus-client==0.26.0
propcache==0.5.4
protobuf==6.33.6
pycparser==3.0
pydantic==2.14.4
pydantic-core==2.50.5
pygments==2.20.0
pyparsing==3.3.2
python-dateutil==4.0.0
pyyaml==6.0.3
requests==2.34.2
requests-oauthlib==2.0.0
rich==15.0.0
typing-extensions==4.16.0
typing-inspection==0.4.5
tzdata==2026.6
urllib3==2.8.0
websocket-client==1.9.2
yarl==1.25.1
EOF
COPY pyproject.toml README.md ./
COPY admission ./admission
COPY solver ./solver
# Wheels for Berth and every dependency, resolved under the pins (every pin has a manylinux
# wheel for CPython 3.11 on amd64 and arm64, so nothing is compiled).
RUN pip wheel --no-cache-dir --prefer-binary --constraint /tmp/constraints.txt \
        --wheel-dir /wheels .

FROM ${PYTHON}
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
RUN --mount=type=bind,from=build,source=/wheels,target=/wheels \
    pip install --no-cache-dir --no-index --find-links /wheels berth \
 && pip uninstall -y pip setuptools wheel
USER 65532:65532
WORKDIR /tmp
EXPOSE 8443 9090
ENTRYPOINT ["berth"]
CMD ["--help"]
