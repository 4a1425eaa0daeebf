// A fast mock of an OpenAI-compatible streaming server, for benchmarking load clients (benchmarks/serving_client.py).
// POST /v1/completions (and /v1/chat/completions) answers `max_tokens` one-token SSE chunks: the first TTFT ms after
// the request's body arrived, then one every ITL ms (each due time from the first, so timer lateness does not add
// up), then a usage chunk and [DONE]. It records what it actually did: per request, the time from the body's arrival
// to the first chunk's write, the mean gap between its writes, and when it arrived and ended (ms of CLOCK_MONOTONIC,
// the clock of Python's time.monotonic()); GET /stats returns them (from every worker process), POST /reset clears
// them. Node's cluster module runs WORKERS processes on one port, so the server side
// costs little CPU of its own and never queues behind one core.
//
//   node benchmarks/mock_openai_server.js PORT [TTFT_MS=20] [ITL_MS=10] [WORKERS=2]
'use strict';
const cluster = require('node:cluster');
const http = require('node:http');

const [port, ttftMs, itlMs, workers] = [process.argv[2] || 8000, process.argv[3] || 20, process.argv[4] || 10,
  process.argv[5] || 2].map(Number);

if (cluster.isPrimary) {
  let done = [];   // [ttft ms, mean itl ms, tokens, arrived, ended] per finished request, from every worker
  const ask = new Map();
  for (let i = 0; i < workers; i++) cluster.fork();
  cluster.on('message', (worker, msg) => {
    if (msg.done) done.push(msg.done);
    else if (msg.stats) worker.send({ id: msg.id, stats: done });
    else if (msg.reset) { done = []; worker.send({ id: msg.id, stats: [] }); }
  });
  process.on('SIGTERM', () => { for (const w of Object.values(cluster.workers)) w.kill(); process.exit(0); });
} else {
  const pending = new Map();
  let nextId = 0;
  process.on('message', (msg) => { const cb = pending.get(msg.id); pending.delete(msg.id); if (cb) cb(msg.stats); });
  const primary = (what, cb) => { const id = nextId++; pending.set(id, cb); process.send({ ...what, id }); };
  const now = () => Number(process.hrtime.bigint()) / 1e6;

  function stream(body, res, arrived) {
    const n = Math.max(1, (body.max_tokens || body.max_completion_tokens || 16) | 0);   // GuideLLM sends the latter
    const model = JSON.stringify(body.model || 'mock');
    const chat = body.messages !== undefined;
    res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
    const writes = [];
    let i = 0;
    const first = arrived + ttftMs;
    const tick = () => {
      const delta = chat ? `"delta":{"content":" t"}` : `"text":" t","token_ids":[${100 + (i % 1000)}]`;
      res.write(`data: {"id":"cmpl-mock","object":"text_completion","model":${model},"choices":[{"index":0,${delta},` +
                `"finish_reason":${i === n - 1 ? '"length"' : 'null'}}]}\n\n`);
      writes.push(now());
      i += 1;
      if (i < n) { setTimeout(tick, Math.max(0, first + i * itlMs - now())); return; }
      const prompt = Array.isArray(body.prompt) ? body.prompt.length : 1;
      res.end(`data: {"id":"cmpl-mock","choices":[],"usage":{"prompt_tokens":${prompt},"completion_tokens":${n},` +
              `"total_tokens":${prompt + n}}}\n\ndata: [DONE]\n\n`);
      const itl = n > 1 ? (writes[n - 1] - writes[0]) / (n - 1) : 0;
      process.send({ done: [writes[0] - arrived, itl, n, arrived, now()] });
    };
    setTimeout(tick, Math.max(0, first - now()));
  }

  http.createServer({ keepAliveTimeout: 600000 }, (req, res) => {
    if (req.method === 'GET' && (req.url === '/health' || req.url === '/v1/models')) {
      res.writeHead(200, { 'Content-Type': 'application/json' });
      res.end(JSON.stringify({ object: 'list', data: [{ id: 'mock', object: 'model' }] }));
      return;
    }
    if (req.url === '/stats' || req.url === '/reset') {
      primary(req.url === '/stats' ? { stats: true } : { reset: true }, (stats) => {
        res.writeHead(200, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(stats));
      });
      return;
    }
    const parts = [];
    req.on('data', (c) => parts.push(c));
    req.on('end', () => {
      const arrived = now();
      let body;
      try { body = JSON.parse(Buffer.concat(parts).toString() || '{}'); } catch (e) {
        res.writeHead(400); res.end('bad json'); return;
      }
      stream(body, res, arrived);
    });
  }).listen(port, '127.0.0.1');
}
