// The tracker under jsdom, the DOM that Jest and Vitest give unit tests: a test run that
// creates a tracker must end by itself, and `disabled: true` sends nothing at all.
//
// Each case runs in a child Node process with jsdom's window and document made global (as
// those runners do) and asserts that the child exits on its own. The bound only catches a
// child something keeps alive; it is generous, not a measure of speed.
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const SOURCE = fileURLToPath(new URL("../src/pin-tracker.js", import.meta.url));
const EXIT_BOUND_MS = 20_000;

/** A real HTTP server that refuses for now (503): a live tracker retries against it. */
async function unavailableServer() {
  const received = [];
  const server = createServer((request, response) => {
    received.push(`${request.method} ${request.url}`);
    response.writeHead(503, { "Content-Type": "application/json" }).end("{}");
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { received, baseUrl: `http://127.0.0.1:${server.address().port}`, server };
}

/** Runs `body` in a child with jsdom's globals; resolves with how the child ended. */
function underJsdom(body) {
  const script = `
    import { JSDOM } from "jsdom";
    const dom = new JSDOM("<!doctype html><p>test</p>", { url: "http://shop.test/" });
    globalThis.window = dom.window;
    globalThis.document = dom.window.document;
    const { createTracker } = await import(${JSON.stringify(SOURCE)});
    ${body}`;
  return new Promise((resolve) => {
    let stdout = "";
    let stderr = "";
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      cwd: fileURLToPath(new URL("..", import.meta.url)),
      timeout: EXIT_BOUND_MS,
    });
    child.stdout.on("data", (chunk) => (stdout += chunk));
    child.stderr.on("data", (chunk) => (stderr += chunk));
    child.on("exit", (status, signal) => resolve({ stdout: stdout.trim(), stderr, status, signal }));
  });
}

test("a live tracker under jsdom, its start failing and retried, lets the process exit", async () => {
  const { received, baseUrl, server } = await unavailableServer();
  try {
    const child = await underJsdom(`
      const tracker = createTracker({ baseUrl: ${JSON.stringify(baseUrl)} });
      await new Promise((resolve) => tracker.onStatus(resolve));
      console.log(tracker.status);`);
    assert.equal(child.signal, null, "it had to be killed: the tracker held it alive");
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout, "tracking");
    assert.ok(received.length >= 1, "the tracker was live: it sent its start");
  } finally {
    server.close();
  }
});

test("a stopped tracker under jsdom sends nothing more and lets the process exit", async () => {
  const { received, baseUrl, server } = await unavailableServer();
  try {
    const child = await underJsdom(`
      const tracker = createTracker({ baseUrl: ${JSON.stringify(baseUrl)} });
      tracker.stop();
      console.log(tracker.status);`);
    assert.equal(child.signal, null, "it had to be killed: the tracker held it alive");
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout, "stopped");
    assert.ok(received.length <= 1, received.join(", ")); // at most the start already on its way
  } finally {
    server.close();
  }
});

test("disabled under jsdom: status disabled, nothing sent, the process exits", async () => {
  const { received, baseUrl, server } = await unavailableServer();
  try {
    const child = await underJsdom(`
      const tracker = createTracker({ baseUrl: ${JSON.stringify(baseUrl)}, disabled: true });
      console.log(tracker.status, await tracker.track("search", { query: "flat" }));`);
    assert.equal(child.signal, null, "it had to be killed: something held it alive");
    assert.equal(child.status, 0, child.stderr);
    assert.equal(child.stdout, "disabled null");
    assert.deepEqual(received, []);
  } finally {
    server.close();
  }
});
