// Builds the tracker with esbuild: an ES module, a CommonJS module (for `require`) and a
// script-tag (IIFE, global `PinTracker`) build, minified, with source maps, into dist/ with
// the type declarations (one copy for `import`, one for `require`).
//
//   node build.mjs            dist/ (what `npm pack` ships)
//   node build.mjs --service  dist/ and the copies the service serves from its package data,
//                             with the version it serves at /static/pin-tracker.<version>.iife.js
//   node build.mjs --check    fails when the service's copies are not this source's build
import { build } from "esbuild";
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { basename, join } from "node:path";

const SERVICE_STATIC = "../../src/pin_sessions/web/static";
// `service`: the builds the service serves (/static/pin-tracker.js, /static/pin-tracker.iife.js).
const BUILDS = [
  { service: true, options: { format: "esm", outfile: "dist/pin-tracker.js" } },
  { service: false, options: { format: "cjs", outfile: "dist/pin-tracker.cjs" } },
  {
    service: true,
    options: { format: "iife", globalName: "PinTracker", outfile: "dist/pin-tracker.iife.js" },
  },
];

async function outputs() {
  const files = [];
  for (const { service, options } of BUILDS) {
    const result = await build({
      entryPoints: ["src/pin-tracker.js"],
      bundle: true,
      minify: true,
      sourcemap: true,
      target: "es2022",
      legalComments: "none",
      logLevel: "warning",
      write: false,
      ...options,
    });
    files.push(...result.outputFiles.map((file) => ({ file, service })));
  }
  return files;
}

const files = await outputs();
const { version } = JSON.parse(readFileSync("package.json", "utf8"));
// The version names the immutable URL of the script tag, so it travels with the builds.
files.push({
  file: { path: "pin-tracker.version", contents: new TextEncoder().encode(`${version}\n`) },
  service: "only",
});
const mode = process.argv[2];
if (mode === "--check") {
  const stale = files.filter(({ service }) => service).map(({ file }) => file).filter((file) => {
    try {
      return !readFileSync(join(SERVICE_STATIC, basename(file.path))).equals(Buffer.from(file.contents));
    } catch {
      return true;
    }
  });
  for (const file of stale) console.error(`stale: ${join(SERVICE_STATIC, basename(file.path))}`);
  if (stale.length) console.error("run `npm run build:service` in clients/js");
  process.exit(stale.length ? 1 : 0);
}
mkdirSync("dist", { recursive: true });
for (const { file, service } of files) {
  if (service !== "only") writeFileSync(file.path, file.contents);
  if (mode === "--service" && service) {
    writeFileSync(join(SERVICE_STATIC, basename(file.path)), file.contents);
  }
}
// The same declarations describe the ES module and, as a .d.cts, the CommonJS one.
copyFileSync("src/pin-tracker.d.ts", "dist/pin-tracker.d.ts");
copyFileSync("src/pin-tracker.d.ts", "dist/pin-tracker.d.cts");
