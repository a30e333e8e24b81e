FROM python:3.11-slim
WORKDIR /app
COPY pyproject.toml README.md ./
COPY ledger ledger
COPY pricing pricing
COPY workers workers
COPY migrations migrations
RUN pip install --no-cache-dir .
ENV LEDGER_HOST=0.0.0.0
EXPOSE 8000
CMD ["ledger", "serve", "--host", "0.0.0.0", "--port", "8000"]
