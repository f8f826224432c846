package faults

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/sentinel-gateway/sentinel/internal/redistest"
	"github.com/sentinel-gateway/sentinel/limit/store"
	"github.com/sentinel-gateway/sentinel/test/harness"
)

// TestFaultStartClusterCatalogMasterDown starts a pod while the master that
// holds the catalog's slot is down (a 3-master Redis Cluster without
// replicas): the pod starts instead of exiting, serves with its
// configuration's rules, refuses API writes, applies a configuration
// reload, shows sentinel_catalog_loaded 0, and loads the catalog (the
// master came back empty) and takes writes once that master is back.
func TestFaultStartClusterCatalogMasterDown(t *testing.T) {
	cl := redistest.StartCluster(t)
	up := harness.StartUpstream(t)
	cfg := clusterConfig(up.URL, cl.Addrs)
	putAPIRule(t, cfg)

	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: cl.Addrs, Cluster: true})
	require.NoError(t, err)
	slot, err := rc.Do(context.Background(), rc.B().ClusterKeyslot().Key("sentinel:{catalog}:rules").Build()).AsInt64()
	rc.Close()
	require.NoError(t, err)
	master := cl.Nodes[int(slot)*3/16384] // Nodes[i] serves the i-th third of the slots
	master.Stop()

	b := harness.Start(t, cfg)
	errs := harness.Scrape(t, b.Admin, "sentinel_catalog_sync_errors_total")
	checkServesWithoutCatalog(t, b, cfg)
	harness.Eventually(t, 10*time.Second, "the first load is retried in the background", func() bool {
		return harness.Scrape(t, b.Admin, "sentinel_catalog_sync_errors_total") > errs
	})

	master.Restart() // empty, like a master without replica or persistence
	took := harness.Eventually(t, 30*time.Second, "the catalog loads once its master is back", func() bool {
		return catalogLoaded(t, b.Admin) == "1"
	})
	t.Logf("faults: catalog loaded %v after its master came back", took.Round(time.Millisecond))
	checkLoadedAfter(t, b)
}

// TestFaultStartCatalogReadFails starts a pod on a single redis-server that
// answers the connection but fails the catalog's read (a key of the wrong
// type: the store answers with an error): the pod starts, serves with its
// configuration's rules, and loads the API's rule once the read works.
func TestFaultStartCatalogReadFails(t *testing.T) {
	srv := redistest.Start(t)
	up := harness.StartUpstream(t)
	cfg := harness.Config(up.URL, append(faultSections(`{addrs: ["`+srv.Addr+`"]}`, "{ip: 0, tenant: 0}"),
		harness.WithSection("tenants", "  - {id: t0, plan: FREE, api_keys: [t0-key]}\n"))...)
	putAPIRule(t, cfg)

	rc, err := store.NewRedisClient(store.RedisConfig{Addrs: []string{srv.Addr}})
	require.NoError(t, err)
	defer rc.Close()
	ctx := context.Background()
	const rules, aside = "sentinel:{catalog}:rules", "sentinel:{catalog}:rules-aside"
	require.NoError(t, rc.Do(ctx, rc.B().Rename().Key(rules).Newkey(aside).Build()).Error())
	require.NoError(t, rc.Do(ctx, rc.B().Set().Key(rules).Value("not a hash").Build()).Error())

	b := harness.Start(t, cfg)
	checkServesWithoutCatalog(t, b, cfg)

	require.NoError(t, rc.Do(ctx, rc.B().Rename().Key(aside).Newkey(rules).Build()).Error())
	took := harness.Eventually(t, 10*time.Second, "the catalog loads once the read works", func() bool {
		return catalogLoaded(t, b.Admin) == "1"
	})
	t.Logf("faults: catalog loaded %v after the read works again", took.Round(time.Millisecond))
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", b.Admin+"/v1/rules/apico/default", "").Status, "the API's rule applies")
	checkLoadedAfter(t, b)
}

// TestFaultStartRedisClosesConnections: the pod's Redis (reached through a
// link) answers the connection at build, then closes every connection
// before the first load of the catalog: the pod starts, serves with its
// configuration's rules, and loads the API's rule once Redis answers again.
func TestFaultStartRedisClosesConnections(t *testing.T) {
	srv := redistest.Start(t)
	link := harness.Listen(t, srv.Addr)
	up := harness.StartUpstream(t)
	cfg := harness.Config(up.URL, append(faultSections(`{addrs: ["`+link.Addr()+`"]}`, "{ip: 0, tenant: 0}"),
		harness.WithSection("tenants", "  - {id: t0, plan: FREE, api_keys: [t0-key]}\n"))...)
	putAPIRule(t, cfg)

	b := harness.StartWith(t, cfg, harness.Options{BeforeServe: link.Cut})
	checkServesWithoutCatalog(t, b, cfg)

	link.Restore()
	took := harness.Eventually(t, 10*time.Second, "the catalog loads once Redis answers", func() bool {
		return catalogLoaded(t, b.Admin) == "1"
	})
	t.Logf("faults: catalog loaded %v after the link came back", took.Round(time.Millisecond))
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", b.Admin+"/v1/rules/apico/default", "").Status, "the API's rule applies")
	checkLoadedAfter(t, b)
}

// putAPIRule writes tenant apico and its rule through a pod on cfg, which
// then stops (the next pod is a restart).
func putAPIRule(t *testing.T, cfg string) {
	t.Helper()
	a := harness.Start(t, cfg)
	require.Equal(t, http.StatusOK, harness.Do(t, "PUT", a.Admin+"/v1/tenants/apico", `{"plan":"FREE","api_keys":["apico-key"]}`).Status)
	resp := harness.Do(t, "PUT", a.Admin+"/v1/rules/apico/default", `{"algorithm":"sliding_window","limit":4,"window":"1m"}`)
	require.Equal(t, http.StatusOK, resp.Status, "%s", resp.Body)
	assert.Equal(t, "1", catalogLoaded(t, a.Admin), "a pod whose first load worked")
	a.Stop()
}

// checkServesWithoutCatalog: the pod serves with its configuration's rules
// (t0), has not loaded the API's (apico), refuses API writes, shows it in
// /metrics, and applies a configuration reload meanwhile.
func checkServesWithoutCatalog(t *testing.T, g *harness.Gateway, cfg string) {
	t.Helper()
	code, _ := limitOf(g.URL+"/c", "t0-key")
	assert.Equal(t, http.StatusOK, code, "the pod serves with its configuration's tenants")
	assert.Equal(t, "0", catalogLoaded(t, g.Admin), "the catalog not loaded shows in /metrics")
	assert.Equal(t, http.StatusNotFound, harness.Do(t, "GET", g.Admin+"/v1/rules/apico/default", "").Status)
	put := harness.Do(t, "PUT", g.Admin+"/v1/rules/t0/other", `{"algorithm":"sliding_window","limit":4,"window":"1m"}`)
	assert.NotEqual(t, http.StatusOK, put.Status, "a write before the first load is refused: %s", put.Body)

	next := strings.Replace(cfg, "  - {id: t0,", "  - {id: reloaded, plan: FREE, api_keys: [reloaded-key]}\n  - {id: t0,", 1)
	require.NotEqual(t, cfg, next)
	require.NoError(t, os.WriteFile(g.Path, []byte(next), 0o600))
	applied, _, err := g.Reload()
	require.NoError(t, err, "a reload before the first load applies")
	assert.Contains(t, applied, "tenants")
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/v1/tenants/reloaded", "").Status)
}

// checkLoadedAfter: once loaded, the pod keeps the reloaded
// configuration's tenant under the API's entries and takes writes.
func checkLoadedAfter(t *testing.T, g *harness.Gateway) {
	t.Helper()
	assert.Equal(t, http.StatusOK, harness.Do(t, "GET", g.Admin+"/v1/tenants/reloaded", "").Status)
	put := harness.Do(t, "PUT", g.Admin+"/v1/rules/t0/other", `{"algorithm":"sliding_window","limit":4,"window":"1m"}`)
	assert.Equal(t, http.StatusOK, put.Status, "%s", put.Body)
}

var loadedLine = regexp.MustCompile(`(?m)^sentinel_catalog_loaded (\S+)$`)

// catalogLoaded is the value of sentinel_catalog_loaded ("" when absent).
func catalogLoaded(t *testing.T, admin string) string {
	t.Helper()
	m := loadedLine.FindStringSubmatch(string(harness.Do(t, "GET", admin+"/metrics", "").Body))
	if m == nil {
		return ""
	}
	return m[1]
}
