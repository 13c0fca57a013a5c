// The tracker outside a browser (Node, server-side rendering): inert. It reports
// "no-browser", sends nothing, stores nothing and holds no timer, so it neither starts a
// session for the server nor keeps the process alive.
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { createServer } from "node:http";
import { test } from "node:test";
import { fileURLToPath } from "node:url";

const SOURCE = fileURLToPath(new URL("../src/pin-tracker.js", import.meta.url));

/** A real HTTP server counting what reaches it: where a tracker would send its start. */
async function countingServer() {
  const received = [];
  const server = createServer((request, response) => {
    received.push(`${request.method} ${request.url}`);
    response.writeHead(200, { "Content-Type": "application/json" });
    response.end('{"sessionId":"s","anonymousId":"a","userId":null}');
  });
  await new Promise((resolve) => server.listen(0, "127.0.0.1", resolve));
  return { received, baseUrl: `http://127.0.0.1:${server.address().port}`, server };
}

const timers = () => process.getActiveResourcesInfo().filter((kind) => kind === "Timeout").length;

test("createTracker in Node is inert: no-browser, nothing sent or stored, no timer", async () => {
  const { createTracker } = await import(SOURCE);
  const { received, baseUrl, server } = await countingServer();
  try {
    const before = timers();
    const tracker = createTracker({ baseUrl });
    assert.equal(tracker.status, "no-browser");
    assert.equal(timers(), before, "no heartbeat timer");
    assert.equal(await tracker.start(), null);
    assert.equal(await tracker.track("search", { query: "flat" }), null);
    assert.equal(await tracker.viewStart("0b7f8c3e-6a52-4c1e-9d1a-5f0c2a7e4b11"), null);
    assert.equal(await tracker.link("token"), null);
    tracker.optIn();
    assert.equal(await tracker.reset(), null);
    await tracker.flush();
    assert.equal(tracker.anonymousId, null);
    assert.equal(tracker.status, "no-browser");
    assert.equal(timers(), before, "still no timer");
    // A round trip to the server, so a request sent by any of the above has arrived.
    await fetch(`${baseUrl}/probe`);
    assert.deepEqual(received, ["GET /probe"]);
  } finally {
    server.close();
  }
});

test("a process that creates a tracker exits by itself", async () => {
  const { received, baseUrl, server } = await countingServer();
  try {
    const script = `import(${JSON.stringify(SOURCE)}).then(({ createTracker }) => {
      const tracker = createTracker({ baseUrl: ${JSON.stringify(baseUrl)} });
      console.log(tracker.status);
    });`;
    // Asynchronous, so the server above keeps answering while the child runs; the
    // timeout kills a child that something keeps alive.
    const child = await new Promise((resolve) => {
      let stdout = "";
      const node = spawn("node", ["--input-type=module", "-e", script], { timeout: 60_000 });
      node.stdout.on("data", (chunk) => (stdout += chunk));
      node.on("exit", (status, signal) => resolve({ stdout, status, signal }));
    });
    assert.equal(child.signal, null, "it had to be killed: something held it alive");
    assert.equal(child.status, 0);
    assert.equal(child.stdout.trim(), "no-browser");
    assert.deepEqual(received, []);
  } finally {
    server.close();
  }
});

test("given a window, the tracker runs outside a browser too (as its tests do)", () => {
  const result = spawnSync(
    "node",
    [
      "--input-type=module",
      "-e",
      `const { createTracker } = await import(${JSON.stringify(SOURCE)});
       const tracker = createTracker({ window: new EventTarget(), autoStart: false,
         storage: null, indexedDB: null, fetch: async () => new Response("{}") });
       console.log(tracker.status);`,
    ],
    { encoding: "utf8", timeout: 60_000 },
  );
  assert.equal(result.status, 0, result.stderr);
  assert.equal(result.stdout.trim(), "stopped");
});
