package limit

import "github.com/sentinel-gateway/sentinel/limit/limitconf"

// Config is the `limits` section. It lives in limitconf with its enums and
// their validation, which the configuration's loader and the admin API
// read without the limiter.
type Config = limitconf.Config
