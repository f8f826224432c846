package gateway

import (
	"slices"

	"github.com/sentinel-gateway/sentinel/rls"
)

// grpcFilesKey is the key of the rate limit service's configuration files:
// a reload re-reads them even when the key did not change.
const grpcFilesKey = "grpc.config_files"

// stagedFiles are the rate limit service's configuration files read for a
// reload, before it applies.
type stagedFiles struct {
	files   *rls.Files
	changed bool // the files' contents differ from the ones served
}

// stageFiles reads next's grpc.config_files, all or nothing: an invalid
// file refuses the reload. Without a gRPC listener there is nothing to read.
func (a *Gateway) stageFiles(next *Config) (stagedFiles, error) {
	if a.rls == nil || len(next.GRPC.ConfigFiles) == 0 {
		return stagedFiles{changed: a.rls != nil && a.rls.FilesChanged(nil)}, nil
	}
	f, err := rls.LoadFiles(next.GRPC.ConfigFiles)
	if err != nil {
		return stagedFiles{}, err
	}
	return stagedFiles{files: f, changed: a.rls.FilesChanged(f)}, nil
}

// withFiles adds grpc.config_files to the changed keys when the files'
// contents changed under the same paths.
func (s stagedFiles) withFiles(changed []string) []string {
	if !s.changed || slices.Contains(changed, grpcFilesKey) {
		return changed
	}
	changed = append(changed, grpcFilesKey)
	slices.Sort(changed)
	return changed
}

// commitFiles serves the staged files and next's grpc.descriptor_override.
func (a *Gateway) commitFiles(s stagedFiles, next *Config) {
	if a.rls == nil || (!s.changed && next.GRPC.Overrides() == a.cfg.GRPC.Overrides()) {
		return
	}
	a.rls.SetFiles(s.files, next.GRPC.Overrides())
	a.cfg.GRPC.ConfigFiles, a.cfg.GRPC.DescriptorOverride = next.GRPC.ConfigFiles, next.GRPC.DescriptorOverride
}
