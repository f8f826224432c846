// Package confutil holds what every configuration section shares: the
// ByteSize and Duration value types that YAML, the environment and JSON spell
// as text ("10MB", "1s"), SetDefault for zero values, and checks that return
// errors naming the YAML key.
package confutil
