"""The library packages under libs/, each held to the libs' layering by
//tools/depcheck:libs_test. //tools/depcheck:depcheck_test fails when a
package under libs/ is missing here, so a new library is guarded the day it
appears."""

LIBS = [
    "//libs/admission",
    "//libs/apis/config/v1alpha1",
    "//libs/configclient",
    "//libs/evalmetrics",
    "//libs/evalwire",
    "//libs/executortable",
    "//libs/fnexec",
    "//libs/fnresult",
    "//libs/grpcserving",
    "//libs/imagematch",
    "//libs/imagemeta",
    "//libs/intake",
    "//libs/kptrender",
    "//libs/memlimit",
    "//libs/proctree",
    "//libs/reporttoken",
    "//libs/resourcelist",
    "//libs/restconfig",
    "//libs/sandbox",
    "//libs/sandbox/fnsandbox",
    "//libs/sandbox/spec",
    "//libs/sendonce",
    "//libs/telemetry",
    "//libs/templatemerge",
]
