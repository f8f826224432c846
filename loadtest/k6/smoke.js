// k6 smoke test: a few requests through the gateway with one API key; every
// answer must be 200 (keep RATE × DURATION under the key's limit) and carry the
// rate-limit headers.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e API_KEY=acme-live-1 -e RATE=2 -e DURATION=5s loadtest/k6/smoke.js
import http from 'k6/http';
import { check } from 'k6';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const API_KEY = __ENV.API_KEY || 'acme-live-1';

export const options = {
  scenarios: {
    smoke: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE || 2),
      timeUnit: '1s',
      duration: __ENV.DURATION || '5s',
      preAllocatedVUs: 2,
      maxVUs: 10,
    },
  },
  thresholds: {
    checks: ['rate==1'],
    http_req_failed: ['rate==0'],
    http_req_duration: ['p(99)<100'],
  },
};

export default function () {
  const res = http.get(`${BASE_URL}/k6/smoke?x=1`, { headers: { 'X-API-Key': API_KEY } });
  check(res, {
    'status is 200': (r) => r.status === 200,
    'X-RateLimit-Limit': (r) => r.headers['X-Ratelimit-Limit'] !== undefined,
    'X-RateLimit-Remaining': (r) => r.headers['X-Ratelimit-Remaining'] !== undefined,
    'echoed by the backend': (r) => r.body.indexOf('/k6/smoke') >= 0,
  });
}
