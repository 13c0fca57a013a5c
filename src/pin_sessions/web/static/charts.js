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

/** The width the chart occupies on screen, so its text is drawn at its CSS size on a phone too. */
function screenWidth(svg, fallback) {
  const measured = Math.round(svg.getBoundingClientRect().width);
  return measured > 0 ? measured : fallback;
}

/**
 * Stacked vertical bars, one per item: `[{label, segments: [{value, className, title}],
 * marked}]`. Every bar carries its total above it when there is room; the labels of a long
 * range thin out (and say so by their spacing) rather than overlap; a `marked` item (today)
 * is outlined and labelled in bold.
 */
export function stackedBars(svg, items, { height = 260, emptyMessage = "No data" } = {}) {
  const width = screenWidth(svg, 640);
  reset(svg, width, height);
  const total = (item) => item.segments.reduce((sum, segment) => sum + segment.value, 0);
  const maximum = Math.max(0, ...items.map(total));
  if (items.length === 0 || maximum === 0) return empty(svg, width, height, emptyMessage);
  svg.dataset.empty = "false";
  const left = 40, bottom = 34, top = 18;
  const plotHeight = height - bottom - top;
  const ceiling = niceCeiling(maximum);
  const slot = (width - left - 8) / items.length;
  const barWidth = Math.max(2, Math.min(44, slot * 0.72));
  const baseline = top + plotHeight;
  svg.append(element("line", { x1: left, y1: baseline, x2: width - 4, y2: baseline, class: "axis" }));
  // Counts are whole: a half-way line only where it is a whole number.
  for (const tick of [0, ceiling / 2, ceiling].filter(Number.isInteger)) {
    const y = baseline - (tick / ceiling) * plotHeight;
    if (tick > 0) svg.append(element("line", { x1: left, y1: y, x2: width - 4, y2: y, class: "grid" }));
    svg.append(element("text", { x: left - 6, y: y + 4, "text-anchor": "end" }, String(tick)));
  }
  // A label needs about 44 px; beyond that, every n-th day, always the marked one, and no
  // other label close enough to collide with it.
  const labelEvery = Math.max(1, Math.ceil(44 / slot));
  const markedIndex = items.findIndex((item) => item.marked);
  const labelled = (index) =>
    index === markedIndex ||
    (index % labelEvery === 0 && (markedIndex < 0 || Math.abs(index - markedIndex) >= labelEvery));
  items.forEach((item, index) => {
    const x = left + index * slot + (slot - barWidth) / 2;
    let y = baseline;
    for (const segment of item.segments) {
      if (segment.value <= 0) continue;
      const h = (segment.value / ceiling) * plotHeight;
      y -= h;
      const bar = element("rect", { x, y, width: barWidth, height: h, class: `bar ${segment.className}` });
      bar.append(element("title", {}, `${item.label}: ${segment.title} ${segment.value}`));
      svg.append(bar);
    }
    const sum = total(item);
    if (item.marked) {
      svg.append(element("rect", { x: x - 2, y: top - 2, width: barWidth + 4, height: plotHeight + 2, class: "marked" }));
    }
    if (sum > 0 && slot >= 18) {
      svg.append(element("text", { x: x + barWidth / 2, y: y - 4, "text-anchor": "middle", class: "value" }, String(sum)));
    }
    if (labelled(index)) {
      // The last label of a crowded axis ends at its bar, so the chart's edge never cuts it.
      const atEnd = labelEvery > 1 && index === items.length - 1;
      const label = element(
        "text",
        { x: atEnd ? x + barWidth : x + barWidth / 2, y: height - 14, "text-anchor": atEnd ? "end" : "middle" },
        item.label,
      );
      if (item.marked) label.classList.add("marked");
      svg.append(label);
    }
  });
}

/**
 * Vertical bars over ordered ranges (a histogram): `[{label, value}]`, the count above each
 * bar and every range labelled under it.
 */
export function histogram(svg, bins, { height = 240, emptyMessage = "No data" } = {}) {
  const width = screenWidth(svg, 420);
  reset(svg, width, height);
  const maximum = Math.max(0, ...bins.map((bin) => bin.value));
  if (bins.length === 0 || maximum === 0) return empty(svg, width, height, emptyMessage);
  svg.dataset.empty = "false";
  const bottom = 40, top = 18, side = 6;
  const plotHeight = height - bottom - top;
  const slot = (width - 2 * side) / bins.length;
  const baseline = top + plotHeight;
  svg.append(element("line", { x1: side, y1: baseline, x2: width - side, y2: baseline, class: "axis" }));
  bins.forEach((bin, index) => {
    const x = side + index * slot;
    const centre = x + slot / 2;
    if (bin.value > 0) {
      const h = Math.max(1, (bin.value / maximum) * plotHeight);
      const bar = element("rect", { x: x + 1, y: baseline - h, width: Math.max(1, slot - 2), height: h, class: "bar duration" });
      bar.append(element("title", {}, `${bin.label}: ${bin.value} sessions`));
      svg.append(bar, element("text", { x: centre, y: baseline - h - 4, "text-anchor": "middle", class: "value" }, String(bin.value)));
    }
    // Labels alternate between two rows when the ranges are narrow.
    const row = slot < 52 && index % 2 === 1 ? 14 : 0;
    svg.append(element("text", { x: centre, y: baseline + 14 + row, "text-anchor": "middle" }, bin.label));
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
