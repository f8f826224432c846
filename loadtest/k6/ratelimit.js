// k6 script that proves enforcement: one API key offered more than its limit
// through the gateway. It fails unless the gateway allowed at most
// LIMIT × windows (+ TOLERANCE) and at least 90% of it, so a gateway that
// never limits fails, and so does one that limits far too much. Every answer
// must be 200 or 429, 429s carry Retry-After and the JSON body, and every
// answer carries the rate-limit headers.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e API_KEY=demo-key-1 -e LIMIT=5 -e WINDOW=10s \
//          -e RATE=20 -e DURATION=30s -e SUMMARY=ratelimit-summary.json loadtest/k6/ratelimit.js
//
// LIMIT and WINDOW are the limit that binds for API_KEY (config.yaml: the
// demo tenant's rule, 5 per 10 s). The key must not have been used within
// the last WINDOW, or the run starts with part of the budget spent.
// TOLERANCE (default 1) allows one approval at a window boundary.
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';
import { count, seconds, summarize } from './lib/summary.js';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const API_KEY = __ENV.API_KEY || 'demo-key-1';
const LIMIT = Number(__ENV.LIMIT || 5);
const WINDOW = __ENV.WINDOW || '10s';
const RATE = Number(__ENV.RATE || 20);
const DURATION = __ENV.DURATION || '30s';
const TOLERANCE = Number(__ENV.TOLERANCE || 1);

const windows = Math.ceil(seconds(DURATION) / seconds(WINDOW));
const budget = LIMIT * windows;
const most = budget + TOLERANCE;
const least = Math.ceil(0.9 * budget);
const offered = RATE * seconds(DURATION);
if (offered < 2 * most) {
  throw new Error(`RATE × DURATION = ${offered} requests is under twice the budget (${most}): ` +
    'a gateway that never limits would pass; raise RATE or DURATION');
}

const allowed = new Counter('allowed');
const limited = new Counter('limited');

export const options = {
  scenarios: {
    over_limit: {
      executor: 'constant-arrival-rate',
      rate: RATE,
      timeUnit: '1s',
      duration: DURATION,
      preAllocatedVUs: 20,
      maxVUs: 200,
    },
  },
  thresholds: {
    allowed: [`count<=${most}`, `count>=${least}`],
    limited: ['count>0'],
    checks: ['rate>0.999'],
    'http_req_duration{expected_response:true}': ['p(99)<50'],
  },
};

export default function () {
  const res = http.get(`${BASE_URL}/k6`, {
    headers: { 'X-API-Key': API_KEY },
    responseCallback: http.expectedStatuses(200, 429),
  });
  check(res, {
    'status is 200 or 429': (r) => r.status === 200 || r.status === 429,
    'rate-limit headers': (r) => r.headers['X-Ratelimit-Limit'] !== undefined,
  });
  if (res.status === 200) allowed.add(1);
  if (res.status === 429) {
    limited.add(1);
    check(res, {
      '429 has Retry-After': (r) => r.headers['Retry-After'] !== undefined,
      '429 body names the limit': (r) => r.json('limit') > 0 && r.json('retry_after_ms') >= 0,
    });
  }
}

export function handleSummary(data) {
  const a = count(data, 'allowed');
  return summarize(data, `ratelimit.js: ${API_KEY} at ${RATE}/s for ${DURATION}, limit ${LIMIT} per ${WINDOW}`, [
    `offered ${count(data, 'http_reqs')} requests, allowed ${a}, limited ${count(data, 'limited')}`,
    `budget ${LIMIT} × ${windows} windows = ${budget}; allowed must be within ${least}..${most} ` +
      `(90% of the budget .. budget + ${TOLERANCE}): ${(100 * a / budget).toFixed(1)}% of the budget`,
  ]);
}
