# flowpark: the HTTP service with its sweep, on SQLite by default.
#   docker build -t flowpark .
#   docker run -p 8000:8000 -e FLOWPARK_API_TOKENS=change-me -v flowpark-data:/var/lib/flowpark flowpark
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /srv/flowpark

COPY . .
RUN pip install .

# The Alembic scripts (alembic.ini, alembic/) are not part of the installed distribution:
# import the app from the source tree next to them so `flowpark db upgrade` finds them.
ENV PYTHONPATH=/srv/flowpark

RUN useradd --system --create-home --home-dir /var/lib/flowpark flowpark
USER flowpark

# SQLite file on a volume; set FLOWPARK_DATABASE_URL=postgresql://... for PostgreSQL.
# FLOWPARK_SELF_URL: how the node calls itself (the sample's fake OCR and its webhook).
# FLOWPARK_API_TOKENS is deliberately not set here: the default 'dev-token' is for local
# trials only; pass your own with -e FLOWPARK_API_TOKENS=...
ENV FLOWPARK_DATABASE_URL=sqlite:////var/lib/flowpark/flowpark.db \
    FLOWPARK_SELF_URL=http://127.0.0.1:8000
VOLUME ["/var/lib/flowpark"]

EXPOSE 8000

HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/healthz', timeout=4)"]

CMD ["sh", "-c", "flowpark db upgrade && exec flowpark serve --host 0.0.0.0 --port 8000"]
