// k6 script: traffic through the gateway for one API key, checking that every
// answer is 200 or 429, that 429s carry Retry-After and the JSON body, and
// that proxied answers carry the rate-limit headers.
//
//   k6 run -e BASE_URL=http://127.0.0.1:8080 -e API_KEY=demo-key-1 -e RATE=20 -e DURATION=30s loadtest/k6/ratelimit.js
import http from 'k6/http';
import { check } from 'k6';
import { Counter } from 'k6/metrics';

const BASE_URL = __ENV.BASE_URL || 'http://127.0.0.1:8080';
const API_KEY = __ENV.API_KEY || 'demo-key-1';
const limited = new Counter('limited');

export const options = {
  scenarios: {
    open: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE || 20),
      timeUnit: '1s',
      duration: __ENV.DURATION || '30s',
      preAllocatedVUs: 20,
      maxVUs: 200,
    },
  },
  thresholds: {
    checks: ['rate>0.999'],
    'http_req_duration{expected_response:true}': ['p(99)<50'],
  },
};

export default function () {
  const res = http.get(`${BASE_URL}/k6`, { headers: { 'X-API-Key': API_KEY }, responseCallback: http.expectedStatuses(200, 429) });
  check(res, {
    'status is 200 or 429': (r) => r.status === 200 || r.status === 429,
    'rate-limit headers': (r) => r.headers['X-Ratelimit-Limit'] !== undefined,
  });
  if (res.status === 429) {
    limited.add(1);
    check(res, {
      '429 has Retry-After': (r) => r.headers['Retry-After'] !== undefined,
      '429 body names the limit': (r) => r.json('limit') > 0 && r.json('retry_after_ms') >= 0,
    });
  }
}
