# spectower's own image: the collector, the console and the policy (not SGLang; that is the official image).
FROM python:3.11-slim
WORKDIR /opt/spectower
COPY pyproject.toml README.md ./
COPY spectower ./spectower
COPY plugin ./plugin
COPY collectors ./collectors
COPY storage ./storage
COPY control ./control
COPY simulator ./simulator
COPY console ./console
RUN pip install --no-cache-dir . && useradd --system --uid 10001 spectower && mkdir -p /data /config \
    && chown spectower /data /config
USER spectower
ENV SPECTOWER_DB=sqlite:////data/spectower.db
ENTRYPOINT ["spectower"]
CMD ["--help"]
