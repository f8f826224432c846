// k6 script: the plan mix under overload. PREMIUM and STANDARD keep a steady
// rate while FREE ramps to many times the backend's capacity and back, each
// plan an open-model scenario with a ramping arrival rate. It fails unless
// PREMIUM stays available (2xx) for at least 99% of its requests with a p99
// under 1 s, and unless the gateway shed FREE (under 80% of FREE answered
// 2xx, some of them refused by the gateway itself): a gateway that passes
// everything fails, and so does one that starves PREMIUM.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8180 -e SUMMARY=overload-summary.json loadtest/k6/overload_mix.js
//
// Keys are those of loadtest/overload.yaml (prem-key, std-key, free-key; or
// PREMIUM_KEY, STANDARD_KEY, FREE_KEY). Rates: STEADY (per plan, default
// 20/s) and PEAK (FREE at the top of the spike, default 1000/s); the demo
// backend of `make loadtest-k6` serves 100 requests/s.
import http from 'k6/http';
import { check } from 'k6';
import { Counter, Rate, Trend } from 'k6/metrics';
import { count, rate, summarize } from './lib/summary.js';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8180';
const KEYS = {
  PREMIUM: __ENV.PREMIUM_KEY || 'prem-key',
  STANDARD: __ENV.STANDARD_KEY || 'std-key',
  FREE: __ENV.FREE_KEY || 'free-key',
};
const STEADY = Number(__ENV.STEADY || 20);
const PEAK = Number(__ENV.PEAK || 1000);

const PLANS = ['PREMIUM', 'STANDARD', 'FREE'];
// Per plan: availability (2xx / sent), the gateway's own 429s and 503s, and
// the latency of the 2xx answers.
const available = {};
const shed = {};
const latency = {};
for (const plan of PLANS) {
  const p = plan.toLowerCase();
  available[plan] = new Rate(`available_${p}`);
  shed[plan] = new Counter(`shed_${p}`);
  latency[plan] = new Trend(`ok_duration_${p}`, true);
}

function steady(plan) {
  return {
    executor: 'ramping-arrival-rate',
    exec: 'send',
    env: { PLAN: plan },
    tags: { plan },
    startRate: STEADY,
    timeUnit: '1s',
    preAllocatedVUs: 20,
    maxVUs: 200,
    stages: [{ target: STEADY, duration: '35s' }],
  };
}

export const options = {
  scenarios: {
    premium: steady('PREMIUM'),
    standard: steady('STANDARD'),
    free: {
      executor: 'ramping-arrival-rate',
      exec: 'send',
      env: { PLAN: 'FREE' },
      tags: { plan: 'FREE' },
      startRate: STEADY,
      timeUnit: '1s',
      preAllocatedVUs: 50,
      maxVUs: 600,
      stages: [
        { target: STEADY, duration: '5s' }, // warm-up
        { target: PEAK, duration: '5s' }, // the spike builds
        { target: PEAK, duration: '15s' }, // and holds
        { target: STEADY, duration: '5s' }, // recovery
        { target: STEADY, duration: '5s' },
      ],
    },
  },
  thresholds: {
    available_premium: ['rate>=0.99'],
    available_free: ['rate<0.8'],
    shed_free: ['count>0'],
    ok_duration_premium: ['p(99)<1000'],
  },
  summaryTrendStats: ['med', 'p(95)', 'p(99)', 'max'],
};

export function send() {
  const plan = __ENV.PLAN;
  const res = http.get(`${BASE_URL}/work`, {
    headers: { 'X-API-Key': KEYS[plan] },
    responseCallback: http.expectedStatuses({ min: 200, max: 299 }),
    timeout: '5s',
  });
  const ok = res.status >= 200 && res.status < 300;
  available[plan].add(ok);
  if (ok) latency[plan].add(res.timings.duration);
  if ((res.status === 429 || res.status === 503) && res.headers.Server === 'sentinel') shed[plan].add(1);
  check(res, { 'answered': (r) => r.status !== 0 });
}

export function handleSummary(data) {
  const lines = [];
  for (const plan of PLANS) {
    const p = plan.toLowerCase();
    const d = data.metrics[`ok_duration_${p}`];
    const sent = data.metrics[`available_${p}`];
    lines.push(`${plan.padEnd(8)} sent ${sent ? sent.values.passes + sent.values.fails : 0}` +
      `, availability ${(100 * rate(data, `available_${p}`)).toFixed(2)}%` +
      `, shed by the gateway ${count(data, `shed_${p}`)}` +
      (d ? `, 2xx p50 ${d.values.med.toFixed(1)} ms, p99 ${d.values['p(99)'].toFixed(1)} ms` : ''));
  }
  lines.push(`requests ${count(data, 'http_reqs')}`);
  return summarize(data, `overload_mix.js: PREMIUM and STANDARD ${STEADY}/s, FREE up to ${PEAK}/s`, lines);
}
