FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY pricing pricing
COPY workers workers
COPY migrations migrations
RUN pip install --no-cache-dir . && useradd --system --no-create-home ledger
# The processes need no root: they only talk to PostgreSQL, Redis and their own port.
USER ledger
ENV LEDGER_HOST=0.0.0.0
EXPOSE 8000
# `ledger serve` finishes in-flight requests on SIGTERM (LEDGER_SHUTDOWN_GRACE_SECONDS).
STOPSIGNAL SIGTERM
CMD ["ledger", "serve", "--host", "0.0.0.0", "--port", "8000"]
