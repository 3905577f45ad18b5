"""The images a release pushes, by repository name (REPOSITORY/<name>):
//deploy:release's, and tests/node's, which pushes them as a release does."""

RELEASE_IMAGES = {
    "binary-runner": "//services/binary-runner:image",
    "config-reconciler": "//services/config-reconciler:image",
    "functions": "//functions:image",
    "gateway": "//services/gateway:image",
    "pod-manager": "//services/pod-manager:image",
    "wrapper-server": "//services/wrapper-server:image",
}
