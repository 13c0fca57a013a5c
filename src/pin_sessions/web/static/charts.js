// Tiny SVG charts for the dashboard: no library, no network. Every function clears the
// target <svg> and draws into it; colours come from CSS classes (see pages.css).

const SVG_NS = "http://www.w3.org/2000/svg";

function element(name, attributes = {}, text = undefined) {
  const node = document.createElementNS(SVG_NS, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

function reset(svg, width, height) {
  svg.replaceChildren();
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("role", "img");
}

function empty(svg, width, height, message) {
  svg.append(element("text", { x: width / 2, y: height / 2, "text-anchor": "middle", class: "empty" }, message));
  svg.dataset.empty = "true";
}

/** Round up to 1, 2 or 5 × 10ⁿ so the axis label is a readable number. */
function niceCeiling(value) {
  if (value <= 0) return 1;
  const magnitude = 10 ** Math.floor(Math.log10(value));
  for (const step of [1, 2, 5, 10]) {
    if (value <= step * magnitude) return step * magnitude;
  }
  return 10 * magnitude;
}

/**
 * Stacked vertical bars, one per item: `[{label, segments: [{value, className, title}]}]`.
 */
export function stackedBars(svg, items, { width = 640, height = 240, emptyMessage = "No data" } = {}) {
  reset(svg, width, height);
  const total = (item) => item.segments.reduce((sum, segment) => sum + segment.value, 0);
  const maximum = Math.max(0, ...items.map(total));
  if (items.length === 0 || maximum === 0) return empty(svg, width, height, emptyMessage);
  svg.dataset.empty = "false";
  const left = 36, bottom = 28, top = 10;
  const plotHeight = height - bottom - top;
  const ceiling = niceCeiling(maximum);
  const slot = (width - left - 8) / items.length;
  const barWidth = Math.max(2, Math.min(40, slot * 0.7));
  svg.append(
    element("line", { x1: left, y1: top + plotHeight, x2: width - 4, y2: top + plotHeight, class: "axis" }),
    element("text", { x: left - 6, y: top + 8, "text-anchor": "end" }, String(ceiling)),
    element("text", { x: left - 6, y: top + plotHeight, "text-anchor": "end" }, "0"),
  );
  // Label at most ~10 days so dates never overlap.
  const labelEvery = Math.ceil(items.length / 10);
  items.forEach((item, index) => {
    const x = left + index * slot + (slot - barWidth) / 2;
    let y = top + plotHeight;
    for (const segment of item.segments) {
      if (segment.value <= 0) continue;
      const h = (segment.value / ceiling) * plotHeight;
      y -= h;
      const bar = element("rect", { x, y, width: barWidth, height: h, class: `bar ${segment.className}` });
      bar.append(element("title", {}, `${item.label}: ${segment.title} ${segment.value}`));
      svg.append(bar);
    }
    if (index % labelEvery === 0) {
      svg.append(element("text", { x: x + barWidth / 2, y: height - 10, "text-anchor": "middle" }, item.label));
    }
  });
}

/** Horizontal bars with their values: `[{label, value, text, className}]`. */
export function horizontalBars(svg, items, { width = 420, emptyMessage = "No data" } = {}) {
  const rowHeight = 34;
  const height = Math.max(60, items.length * rowHeight + 12);
  reset(svg, width, height);
  const maximum = Math.max(0, ...items.map((item) => item.value));
  if (items.length === 0 || maximum === 0) return empty(svg, width, height, emptyMessage);
  svg.dataset.empty = "false";
  const left = 70, right = 70;
  items.forEach((item, index) => {
    const y = 8 + index * rowHeight;
    const barWidth = Math.max(2, (item.value / maximum) * (width - left - right));
    svg.append(
      element("text", { x: left - 8, y: y + 16, "text-anchor": "end" }, item.label),
      element("rect", { x: left, y, width: barWidth, height: 22, rx: 3, class: `bar ${item.className}` }),
      element("text", { x: left + barWidth + 6, y: y + 16, class: "value" }, item.text),
    );
  });
}

/** A donut of parts: `[{label, value, className}]`, with the share of each in its title. */
export function donut(svg, parts, { size = 220, emptyMessage = "No data" } = {}) {
  reset(svg, size, size);
  const total = parts.reduce((sum, part) => sum + part.value, 0);
  if (total === 0) return empty(svg, size, size, emptyMessage);
  svg.dataset.empty = "false";
  const centre = size / 2, outer = size / 2 - 6, inner = outer * 0.58;
  let angle = -Math.PI / 2;
  for (const part of parts) {
    if (part.value <= 0) continue;
    const sweep = (part.value / total) * Math.PI * 2;
    const slice = element("path", {
      d: annulusSlice(centre, outer, inner, angle, Math.min(sweep, Math.PI * 2 - 1e-6)),
      class: `slice ${part.className}`,
    });
    slice.append(element("title", {}, `${part.label}: ${part.value} (${Math.round((part.value / total) * 100)}%)`));
    svg.append(slice);
    angle += sweep;
  }
  svg.append(element("text", { x: centre, y: centre + 5, "text-anchor": "middle", class: "value" }, String(total)));
}

function annulusSlice(c, outer, inner, start, sweep) {
  const end = start + sweep;
  const large = sweep > Math.PI ? 1 : 0;
  const point = (radius, angle) => `${c + radius * Math.cos(angle)} ${c + radius * Math.sin(angle)}`;
  return [
    `M ${point(outer, start)}`,
    `A ${outer} ${outer} 0 ${large} 1 ${point(outer, end)}`,
    `L ${point(inner, end)}`,
    `A ${inner} ${inner} 0 ${large} 0 ${point(inner, start)}`,
    "Z",
  ].join(" ");
}

/** "1 h 5 min", "3 min 20 s", "42 s". */
export function formatDuration(seconds) {
  const s = Math.round(seconds ?? 0);
  if (s >= 3600) return `${Math.floor(s / 3600)} h ${Math.round((s % 3600) / 60)} min`;
  if (s >= 60) return `${Math.floor(s / 60)} min ${s % 60} s`;
  return `${s} s`;
}
