package scaffold

import (
	"embed"
	"errors"
)

// sdkFiles holds sdk/: a README, and guest-sdk.zip when the binary was
// built by make (hack/sdkzip writes it).
//
//go:embed sdk
var sdkFiles embed.FS

// EmbeddedSDK returns the archive of the guest SDK this binary carries
// (package internal/sdkarchive), or nil when it was built without one.
func EmbeddedSDK() []byte {
	b, err := sdkFiles.ReadFile("sdk/guest-sdk.zip")
	if err != nil {
		return nil
	}
	return b
}

// ErrNoSDK is the error of FindSDK when no checkout holds the SDK: a
// module then builds against the SDK the binary carries, if it does.
var ErrNoSDK = errors.New("no guest SDK found")

// EmbeddedSDKDir is where Write unpacks Options.EmbeddedSDK, under the
// module's directory.
const EmbeddedSDKDir = "guest-sdk"
