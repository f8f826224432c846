// Summary helpers for handleSummary: a short text report on stdout (every
// threshold with its result, then the given figures) and the whole summary
// object as JSON in the file named by SUMMARY (default: none).

// thresholdLines lists every threshold of data as "✓ metric: expr" lines.
function thresholdLines(data) {
  const out = [];
  for (const [name, m] of Object.entries(data.metrics)) {
    for (const [expr, r] of Object.entries(m.thresholds || {})) {
      out.push(`  ${r.ok ? '✓' : '✗'} ${name}: ${expr}`);
    }
  }
  return out.sort();
}

// count returns a counter's count, or 0 when it never moved.
export function count(data, name) {
  const m = data.metrics[name];
  return m ? m.values.count : 0;
}

// rate returns a Rate metric's rate, or NaN when it has no sample.
export function rate(data, name) {
  const m = data.metrics[name];
  return m ? m.values.rate : NaN;
}

// summarize returns handleSummary's answer: title and figures (lines) on
// stdout, the thresholds, and the JSON file when SUMMARY is set.
export function summarize(data, title, figures) {
  const lines = [title, ...figures.map((f) => `  ${f}`), 'thresholds:', ...thresholdLines(data)];
  const out = { stdout: lines.join('\n') + '\n' };
  if (__ENV.SUMMARY) out[__ENV.SUMMARY] = JSON.stringify(data, null, 2);
  return out;
}

// seconds reads a k6 duration such as "30s", "2m" or "1m30s" in seconds.
export function seconds(d) {
  let total = 0;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h)/g;
  let m;
  let matched = '';
  while ((m = re.exec(d)) !== null) {
    total += Number(m[1]) * { ms: 0.001, s: 1, m: 60, h: 3600 }[m[2]];
    matched += m[0];
  }
  if (matched !== d) throw new Error(`"${d}" is not a duration like 30s, 2m or 1m30s`);
  return total;
}
