// k6 script: the check API on the admin listener.
//
//   k6 run -e ADMIN_URL=http://127.0.0.1:9090 -e TENANT=acme -e RATE=500 -e DURATION=30s loadtest/k6/check_api.js
import http from 'k6/http';
import { check } from 'k6';

const ADMIN_URL = __ENV.ADMIN_URL || 'http://127.0.0.1:9090';
const TOKEN = __ENV.ADMIN_TOKEN || '';

export const options = {
  scenarios: {
    open: {
      executor: 'constant-arrival-rate',
      rate: Number(__ENV.RATE || 500),
      timeUnit: '1s',
      duration: __ENV.DURATION || '30s',
      preAllocatedVUs: 50,
      maxVUs: 500,
    },
  },
  thresholds: {
    checks: ['rate>0.999'],
    http_req_duration: ['p(99)<10'],
  },
};

export default function () {
  const body = JSON.stringify({
    tenant_id: __ENV.TENANT || 'acme',
    resource: __ENV.RESOURCE || 'default',
    key: `user-${__VU}`,
    tokens_requested: 1,
  });
  const headers = { 'Content-Type': 'application/json' };
  if (TOKEN) headers.Authorization = `Bearer ${TOKEN}`;
  const res = http.post(`${ADMIN_URL}/v1/ratelimit/check`, body, { headers });
  check(res, {
    'status 200': (r) => r.status === 200,
    'has a decision': (r) => typeof r.json('allowed') === 'boolean' && r.json('remaining') >= 0,
  });
}
