// k6 version of the overload scenario (loadtest/overload.sh has the same
// phases with the Go generator): PREMIUM, STANDARD and FREE traffic at fixed
// arrival rates against BASE_URL (the demo backend alone, or Sentinel in
// front of it), through
//   (a) a FREE spike to 10× capacity on the queueing backend,
//   (b) the same spike on the backend shedding past a queue of 10,
//   (c) the backend slowing down ×4, then a recovery,
//   (d) an attacker (oversized bodies from k6 here; k6 cannot write broken
//       chunked framing, so loadtest/overload-k6.sh runs `gen` with A=5 for
//       the malformed, oversized and slow chunked uploads at the same time),
//   (e) a closed loop of 64 VUs with the PREMIUM key on SAT_URL (a fast
//       backend, through Sentinel), then on SAT_COMPARE_URL (adaptive.enabled:
//       false), when set.
// The backend is switched between phases through BACKEND_URL/_backend/config.
// With ADMIN_URL, each phase's sheds, rejections, ejections, breaker trips
// and mode changes come from the gateway's /metrics. The summary prints a
// table per phase and the acceptance targets as PASS/FAIL; thresholds carry
// the static ones.
//
//   loadtest/overload-k6.sh      (starts everything and runs this twice)
//   k6 run -e BASE_URL=http://127.0.0.1:8180 -e BACKEND_URL=http://127.0.0.1:9100 \
//     -e ADMIN_URL=http://127.0.0.1:9190 -e SAT_URL=... loadtest/k6/overload.js
import http from 'k6/http';
import exec from 'k6/execution';
import { sleep } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8180';
const BACKEND_URL = __ENV.BACKEND_URL || 'http://127.0.0.1:9100';
const ADMIN_URL = __ENV.ADMIN_URL || '';
const SAT_URL = __ENV.SAT_URL || '';
const SAT_COMPARE_URL = __ENV.SAT_COMPARE_URL || '';
const CAPACITY = Number(__ENV.CAPACITY || 100);
const LABEL = __ENV.LABEL || BASE_URL;
const KEYS = { PREMIUM: 'prem-key', STANDARD: 'std-key', FREE: 'free-key' };

const steady = { PREMIUM: 20, STANDARD: 20, FREE: 20 };
const spike = { PREMIUM: 20, STANDARD: 20, FREE: 1000 };
// The phases, back to back; dur in seconds; hook is the backend's new config.
const PHASES = [
  { name: 'a.warmup', dur: 5, rates: steady },
  { name: 'a.spike', dur: 10, rates: spike },
  { name: 'a.recovery', dur: 8, rates: steady },
  { name: 'b.warmup', dur: 5, rates: steady, hook: 'shed_depth=10&retry_after=1' },
  { name: 'b.spike', dur: 10, rates: spike },
  { name: 'b.recovery', dur: 8, rates: steady },
  { name: 'c.slow', dur: 10, rates: steady, hook: 'shed_depth=0&retry_after=0&latency=200ms' },
  { name: 'c.recovery', dur: 15, rates: steady, hook: 'latency=50ms' },
  { name: 'd.attack', dur: 10, rates: steady, attack: 1 },
];
let t = 0;
for (const p of PHASES) {
  p.start = t;
  t += p.dur;
}
const SAT_START = t;
const SAT_DUR = 10;
const SAT = [];
if (SAT_URL) SAT.push({ name: 'e.saturate', url: SAT_URL });
if (SAT_COMPARE_URL) SAT.push({ name: 'e.compare', url: SAT_COMPARE_URL });

const available = new Rate('available'); // 2xx / sent
const okCount = new Counter('ok_count');
const okDuration = new Trend('ok_duration', true); // of 2xx answers
const gwShed = new Counter('gw_shed'); // 429/503 with Server: sentinel
const failAt = new Trend('fail_at'); // seconds from the phase start of each failure
const attackRefused = new Rate('attack_refused'); // 4xx to an oversized body
const gw = {
  sheds: new Counter('gw_sheds'),
  rejections: new Counter('gw_rejections'),
  ejections: new Counter('gw_ejections'),
  trips: new Counter('gw_breaker_trips'),
  up: new Counter('gw_modes_up'),
  down: new Counter('gw_modes_down'),
};

// sub names a submetric; thresholds declare every one the summary reads.
const sub = (metric, tags) =>
  `${metric}{${Object.entries(tags).map(([k, v]) => `${k}:${v}`).join(',')}}`;

function buildOptions() {
  const scenarios = {};
  const thresholds = {};
  const need = (name, rule) => {
    thresholds[name] = thresholds[name] || [];
    if (rule) thresholds[name].push(rule);
    else if (thresholds[name].length === 0) thresholds[name].push('count>=0');
  };
  for (const p of PHASES) {
    for (const plan of Object.keys(KEYS)) {
      const rate = p.rates[plan];
      scenarios[`${p.name}.${plan}`.replace(/\./g, '_')] = {
        executor: 'constant-arrival-rate', exec: 'send', rate, timeUnit: '1s',
        duration: `${p.dur}s`, startTime: `${p.start}s`, gracefulStop: '3s',
        preAllocatedVUs: Math.min(rate * 2, 500), maxVUs: Math.max(rate * 2, 50),
        tags: { phase: p.name, plan }, env: { KEY: KEYS[plan] },
      };
      for (const m of ['available', 'ok_duration', 'ok_count', 'gw_shed']) {
        thresholds[sub(m, { phase: p.name, plan })] = m === 'available' ? ['rate>=0'] : ['count>=0'];
      }
      thresholds[sub('ok_duration', { phase: p.name, plan })] = ['max>=0'];
    }
    scenarios[`${p.name}.observe`.replace(/\./g, '_')] = {
      executor: 'per-vu-iterations', exec: 'observe', vus: 1, iterations: 1,
      startTime: `${p.start}s`, maxDuration: `${p.dur + 10}s`,
      tags: { phase: p.name }, env: { HOOK: p.hook || '', DUR: String(p.dur) },
    };
    for (const m of Object.keys(gw)) need(sub(gw[m].name, { phase: p.name }));
    thresholds[sub('fail_at', { phase: p.name })] = ['max>=0'];
    need(sub('ok_count', { phase: p.name }));
    if (p.attack) {
      scenarios.d_attack_oversized = {
        executor: 'constant-arrival-rate', exec: 'oversized', rate: p.attack, timeUnit: '1s',
        duration: `${p.dur}s`, startTime: `${p.start}s`, preAllocatedVUs: 2, maxVUs: 10,
        tags: { phase: p.name, plan: 'ATTACK' },
      };
      need(sub('attack_refused', { phase: p.name }), 'rate>=0');
    }
  }
  // Static acceptance targets (the ones relative to a measurement are
  // printed by handleSummary).
  for (const g of ['a', 'b']) {
    thresholds[sub('available', { phase: `${g}.spike`, plan: 'PREMIUM' })] = ['rate>=0.995'];
    thresholds[sub('available', { phase: `${g}.spike`, plan: 'STANDARD' })] = ['rate>=0.95'];
    thresholds[sub('ok_count', { phase: `${g}.spike` })] = [`count>=${0.9 * CAPACITY * 10}`];
    thresholds[sub('fail_at', { phase: `${g}.recovery` })] = ['max<=3'];
  }
  thresholds[sub('available', { phase: 'c.slow', plan: 'PREMIUM' })] = ['rate>=0.995'];
  for (const plan of Object.keys(KEYS)) thresholds[sub('available', { phase: 'd.attack', plan })] = ['rate==1'];
  SAT.forEach((s, i) => {
    scenarios[s.name.replace('.', '_')] = {
      executor: 'constant-vus', exec: 'saturate', vus: 64, duration: `${SAT_DUR}s`,
      startTime: `${SAT_START + i * (SAT_DUR + 2)}s`, gracefulStop: '2s',
      tags: { phase: s.name, plan: 'PREMIUM' }, env: { URL: s.url },
    };
    thresholds[sub('ok_count', { phase: s.name })] = ['count>=0'];
    thresholds[sub('gw_shed', { phase: s.name })] = s.name === 'e.saturate' ? ['count==0'] : ['count>=0'];
    thresholds[sub('ok_duration', { phase: s.name })] = ['max>=0'];
  });
  return {
    scenarios, thresholds, discardResponseBodies: true,
    summaryTrendStats: ['med', 'p(99)', 'max', 'count'],
  };
}

export const options = buildOptions();

function record(res, phaseStart) {
  const ok = res.status >= 200 && res.status < 300;
  available.add(ok);
  if (ok) {
    okCount.add(1);
    okDuration.add(res.timings.duration);
  } else {
    failAt.add((Date.now() - phaseStart) / 1000);
    if ((res.status === 429 || res.status === 503) && res.headers['Server'] === 'sentinel') gwShed.add(1);
  }
}

export function send() {
  const res = http.get(`${BASE_URL}/work`, { headers: { 'X-API-Key': __ENV.KEY }, timeout: '2s' });
  record(res, exec.scenario.startTime);
}

export function saturate() {
  const res = http.get(`${__ENV.URL}/work`, { headers: { 'X-API-Key': KEYS.PREMIUM }, timeout: '2s' });
  record(res, exec.scenario.startTime);
}

const big = 'x'.repeat(2 << 20);

// oversized sends a 2 MiB body with Content-Length: the gateway's
// max_request_body is 1MB in loadtest/overload.yaml.
export function oversized() {
  const res = http.post(`${BASE_URL}/upload`, big, {
    headers: { 'X-API-Key': 'attack-key', 'Content-Type': 'application/octet-stream' }, timeout: '5s',
  });
  attackRefused.add(res.status >= 400 && res.status < 500);
}

// scrape sums the series of a /metrics page by a function of their labels.
function scrape() {
  if (!ADMIN_URL) return null;
  const res = http.get(`${ADMIN_URL}/metrics`, { responseType: 'text', tags: { name: 'scrape' } });
  if (res.status !== 200) return null;
  const out = [];
  for (const line of res.body.split('\n')) {
    const m = line.match(/^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)/);
    if (!m) continue;
    const labels = {};
    for (const l of (m[2] || '').matchAll(/([a-zA-Z_]\w*)="([^"]*)"/g)) labels[l[1]] = l[2];
    out.push({ name: m[1], labels, value: Number(m[3]) });
  }
  return out;
}

function sum(page, name, keep) {
  return page.filter((s) => s.name === name && (!keep || keep(s.labels))).reduce((a, s) => a + s.value, 0);
}

const RANK = { normal: 0, moderate: 1, aggressive: 2, critical: 3 };

// observe switches the backend for the phase, then counts what the gateway's
// metrics say happened during it.
export function observe() {
  if (__ENV.HOOK) http.post(`${BACKEND_URL}/_backend/config?${__ENV.HOOK}`);
  const before = scrape();
  sleep(Number(__ENV.DUR));
  const after = scrape();
  if (!before || !after) return;
  const d = (name, keep) => Math.max(0, sum(after, name, keep) - sum(before, name, keep));
  gw.sheds.add(d('sentinel_shed_total'));
  gw.rejections.add(d('sentinel_proxy_rejections_total'));
  gw.ejections.add(d('sentinel_upstream_ejections_total'));
  gw.trips.add(d('sentinel_upstream_breaker_transitions_total', (l) => l.to === 'open'));
  gw.up.add(d('sentinel_adaptive_mode_transitions_total', (l) => RANK[l.to] > RANK[l.from]));
  gw.down.add(d('sentinel_adaptive_mode_transitions_total', (l) => RANK[l.to] < RANK[l.from]));
}

// handleSummary prints the per-phase tables and the acceptance targets.
export function handleSummary(data) {
  const v = (metric, tags, stat) => {
    const m = data.metrics[sub(metric, tags)];
    return m && m.values[stat] !== undefined ? m.values[stat] : 0;
  };
  const ms = (x) => `${x.toFixed(1)}ms`;
  const pct = (x) => `${(100 * x).toFixed(2)}%`;
  const lines = [`\n### k6: ${LABEL}\n`,
    '| phase | plan | goodput/s | availability | p50 | p99 | gateway 429/503 |',
    '| --- | --- | ---: | ---: | ---: | ---: | ---: |'];
  const phases = PHASES.map((p) => ({ name: p.name, dur: p.dur, plans: Object.keys(KEYS) }))
    .concat(SAT.map((s) => ({ name: s.name, dur: SAT_DUR, plans: ['PREMIUM'] })));
  for (const p of phases) {
    for (const plan of p.plans) {
      const tags = p.name.startsWith('e.') ? { phase: p.name } : { phase: p.name, plan };
      const okDur = p.name.startsWith('e.') ? { phase: p.name } : tags;
      lines.push(`| ${p.name} | ${plan} | ${(v('ok_count', tags, 'count') / p.dur).toFixed(0)} | ` +
        `${p.name.startsWith('e.') ? '-' : pct(v('available', tags, 'rate'))} | ${ms(v('ok_duration', okDur, 'med'))} | ` +
        `${ms(v('ok_duration', okDur, 'p(99)'))} | ${v('gw_shed', tags, 'count')} |`);
    }
  }
  lines.push('', '| phase | goodput/s | last failure after phase start | sheds | rejections | ejections | breaker trips | modes up/down |',
    '| --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |');
  for (const p of PHASES) {
    const t = { phase: p.name };
    const g = (m) => (ADMIN_URL ? v(m, t, 'count') : 'n/a');
    lines.push(`| ${p.name} | ${(v('ok_count', t, 'count') / p.dur).toFixed(0)} | ` +
      `${v('fail_at', t, 'count') ? `+${v('fail_at', t, 'max').toFixed(1)}s` : 'none'} | ${g('gw_sheds')} | ${g('gw_rejections')} | ` +
      `${g('gw_ejections')} | ${g('gw_breaker_trips')} | ${g('gw_modes_up')}/${g('gw_modes_down')} |`);
  }
  const checks = [];
  const check = (phase, target, measured, pass) =>
    checks.push(`| ${phase} | ${target} | ${measured} | ${pass === null ? 'n/a' : pass ? 'PASS' : 'FAIL'} |`);
  for (const g of ['a', 'b']) {
    const sp = { phase: `${g}.spike` };
    const good = v('ok_count', sp, 'count') / 10;
    check(sp.phase, 'goodput ≥ 90% of capacity', `${good.toFixed(0)}/s`, good >= 0.9 * CAPACITY);
    const pa = v('available', { ...sp, plan: 'PREMIUM' }, 'rate');
    check(sp.phase, 'PREMIUM availability ≥ 99.5%', pct(pa), pa >= 0.995);
    const p99 = v('ok_duration', { ...sp, plan: 'PREMIUM' }, 'p(99)');
    // unloaded: the lower of the warmups' (one noisy warmup must not loosen the target)
    const base = Math.min(...['a.warmup', 'b.warmup'].map((w) => v('ok_duration', { phase: w, plan: 'PREMIUM' }, 'p(99)')));
    check(sp.phase, 'PREMIUM p99 ≤ 2× unloaded p99', `${ms(p99)} vs 2×${ms(base)}`, p99 > 0 && p99 <= 2 * base);
    const sa = v('available', { ...sp, plan: 'STANDARD' }, 'rate');
    check(sp.phase, 'STANDARD availability ≥ 95%', pct(sa), sa >= 0.95);
    if (ADMIN_URL) {
      const rec = { phase: `${g}.recovery` };
      const up = v('gw_modes_up', sp, 'count') + v('gw_modes_up', rec, 'count');
      const down = v('gw_modes_down', sp, 'count') + v('gw_modes_down', rec, 'count');
      check(sp.phase, '≤ 1 mode change up and ≤ 1 down', `${up} up, ${down} down`, up <= 1 && down <= 1);
    } else check(sp.phase, '≤ 1 mode change up and ≤ 1 down', 'n/a', null);
    const rec = { phase: `${g}.recovery` };
    const last = v('fail_at', rec, 'count') ? v('fail_at', rec, 'max') : 0;
    check(sp.phase, 'every plan fully available ≤ 3s after the spike', `+${last.toFixed(1)}s`, last <= 3);
  }
  const cp = v('available', { phase: 'c.slow', plan: 'PREMIUM' }, 'rate');
  check('c.slow', 'PREMIUM availability ≥ 99.5%', pct(cp), cp >= 0.995);
  const d = { phase: 'd.attack' };
  if (ADMIN_URL) {
    check(d.phase, 'no ejection', v('gw_ejections', d, 'count'), v('gw_ejections', d, 'count') === 0);
    check(d.phase, 'no breaker trip', v('gw_breaker_trips', d, 'count'), v('gw_breaker_trips', d, 'count') === 0);
    const modes = v('gw_modes_up', d, 'count') + v('gw_modes_down', d, 'count');
    check(d.phase, 'mode stays Normal (no change)', `${modes} changes`, modes === 0);
  }
  for (const plan of Object.keys(KEYS)) {
    const a = v('available', { ...d, plan }, 'rate');
    check(d.phase, `${plan} availability 100%`, pct(a), a === 1);
  }
  if (SAT.length) {
    const sheds = v('gw_shed', { phase: 'e.saturate' }, 'count');
    check('e.saturate', 'zero sheds', sheds, sheds === 0);
  }
  if (SAT.length === 2) {
    const on = v('ok_count', { phase: 'e.saturate' }, 'count') / SAT_DUR;
    const off = v('ok_count', { phase: 'e.compare' }, 'count') / SAT_DUR;
    check('e.saturate', 'throughput ≥ 0.95× adaptive.enabled: false', `${on.toFixed(0)}/s vs ${off.toFixed(0)}/s`, on >= 0.95 * off);
  }
  lines.push('', '| phase | target | measured | result |', '| --- | --- | --- | --- |', ...checks, '');
  return { stdout: lines.join('\n') };
}
