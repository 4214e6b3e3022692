# flowpark: the HTTP service with its sweep, on SQLite by default.
#   docker build -t flowpark .
#   docker run -p 8000:8000 -e FLOWPARK_API_TOKENS=change-me -v flowpark-data:/var/lib/flowpark flowpark
# Your own flows instead of the samples: mount a folder of .py files and name it.
#   docker run -p 8000:8000 -e FLOWPARK_API_TOKENS=change-me -v flowpark-data:/var/lib/flowpark \
#     -v "$PWD/flows:/flows:ro" -e FLOWPARK_FLOWS=/flows flowpark

# Build the wheel (it carries the migrations) from the sources it needs.
FROM python:3.11-slim AS build
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY alembic ./alembic
COPY samples ./samples
COPY flowpark ./flowpark
RUN pip wheel --no-deps --wheel-dir /dist .

# Run the installed distribution; beside it only app/, the deployable application
# (uvicorn app.main:app), which is never installed.
FROM python:3.11-slim
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1
COPY --from=build /dist /dist
RUN pip install /dist/*.whl && rm -rf /dist

RUN useradd --system --create-home --home-dir /var/lib/flowpark flowpark
USER flowpark
WORKDIR /var/lib/flowpark
COPY app /opt/flowpark/app

# SQLite file on a volume; set FLOWPARK_DATABASE_URL=postgresql://... for PostgreSQL.
# FLOWPARK_SELF_URL: how the node calls itself (the samples' fake providers and webhooks).
# FLOWPARK_FLOWS unset serves the samples; set it to a mounted folder (above) for your own.
# FLOWPARK_API_TOKENS is deliberately not set here: the default 'dev-token' is for local
# trials only; pass your own with -e FLOWPARK_API_TOKENS=...
ENV FLOWPARK_DATABASE_URL=sqlite:////var/lib/flowpark/flowpark.db \
    FLOWPARK_SELF_URL=http://127.0.0.1:8000
VOLUME ["/var/lib/flowpark"]

EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

CMD ["sh", "-c", "flowpark db upgrade && exec uvicorn --app-dir /opt/flowpark app.main:app --host 0.0.0.0 --port 8000"]
