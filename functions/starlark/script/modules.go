package script

import (
	"net/http"

	"github.com/kptdev/krm-functions-catalog/functions/go/starlark/krmfn"
	"github.com/qri-io/starlib/bsoup"
	"github.com/qri-io/starlib/encoding/base64"
	"github.com/qri-io/starlib/encoding/csv"
	"github.com/qri-io/starlib/encoding/json"
	"github.com/qri-io/starlib/encoding/yaml"
	"github.com/qri-io/starlib/geo"
	"github.com/qri-io/starlib/hash"
	"github.com/qri-io/starlib/html"
	starlibhttp "github.com/qri-io/starlib/http"
	"github.com/qri-io/starlib/math"
	"github.com/qri-io/starlib/re"
	"github.com/qri-io/starlib/time"
	"github.com/qri-io/starlib/xlsx"
	"github.com/qri-io/starlib/zipfile"
	"go.starlark.net/starlark"
)

// modules are the libraries a script may load(): the catalog's set (qri-io's
// starlib and krmfn), with http going through the bounded client.
type modules struct {
	http *http.Client
}

func (m modules) load(_ *starlark.Thread, module string) (starlark.StringDict, error) {
	switch module {
	case bsoup.ModuleName:
		return bsoup.LoadModule()
	case base64.ModuleName:
		return base64.LoadModule()
	case csv.ModuleName:
		return csv.LoadModule()
	case json.ModuleName:
		return starlark.StringDict{"json": json.Module}, nil
	case yaml.ModuleName:
		return yaml.LoadModule()
	case geo.ModuleName:
		return geo.LoadModule()
	case hash.ModuleName:
		return hash.LoadModule()
	case html.ModuleName:
		return html.LoadModule()
	case starlibhttp.ModuleName:
		// starlib's way to give the module a client: set before loading.
		// This process runs one script, on one thread.
		starlibhttp.Client = m.http
		return starlibhttp.LoadModule()
	case math.ModuleName:
		return starlark.StringDict{"math": math.Module}, nil
	case re.ModuleName:
		return re.LoadModule()
	case time.ModuleName:
		return starlark.StringDict{"time": time.Module}, nil
	case xlsx.ModuleName:
		// Its get_url uses http.Get, which is http.DefaultClient: this
		// process's default client is the bounded one too.
		http.DefaultClient = m.http
		return xlsx.LoadModule()
	case zipfile.ModuleName:
		return zipfile.LoadModule()
	case krmfn.ModuleName:
		return starlark.StringDict{"krmfn": krmfn.Module}, nil
	}
	// As the catalog's: an unknown module loads as nothing.
	return nil, nil
}
