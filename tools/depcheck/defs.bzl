"""depcheck_test: fails when a target links a package it must not.

In the spirit of go-containerregistry's internal/depcheck: the layering's
dependency rules are tests, so a change that breaks one fails
`bazel test //...` and names the chain that brought the package in.
"""

_DepsInfo = provider(
    doc = "The dependency edges below a target, through deps and embed.",
    fields = {"edges": "depset of (from, to) label string pairs"},
)

def _collect_impl(target, ctx):
    here = str(target.label)
    direct = []
    transitive = []
    for attr in ("deps", "embed"):
        for dep in getattr(ctx.rule.attr, attr, []):
            direct.append((here, str(dep.label)))
            if _DepsInfo in dep:
                transitive.append(dep[_DepsInfo].edges)
    return [_DepsInfo(edges = depset(direct, transitive = transitive))]

_collect = aspect(
    implementation = _collect_impl,
    attr_aspects = ["deps", "embed"],
)

def _chain(edges, start, end):
    """One dependency chain from start to end, by breadth-first search."""
    children = {}
    for a, b in edges:
        children.setdefault(a, []).append(b)
    parent = {start: None}
    queue = [start]

    # Starlark has no while loop: the queue grows as it is walked.
    for node in queue:
        if node == end:
            break
        for c in children.get(node, []):
            if c not in parent:
                parent[c] = node
                queue.append(c)
    chain = [end]
    for _ in range(len(parent)):
        p = parent.get(chain[-1])
        if p == None:
            break
        chain.append(p)
    return " -> ".join(reversed(chain))

def _depcheck_test_impl(ctx):
    bad = []
    for target in ctx.attr.targets:
        edges = target[_DepsInfo].edges.to_list()
        reached = {b: True for _, b in edges}
        for label in sorted(reached.keys()):
            for prefix in ctx.attr.forbidden:
                if label.startswith(prefix):
                    bad.append(_chain(edges, str(target.label), label))
    lines = ["#!/bin/sh"]
    if bad:
        lines.append("echo 'Forbidden dependencies (%s):'" % ", ".join(ctx.attr.forbidden))
        lines.extend(["echo '  %s'" % p for p in bad])
        lines.append("exit 1")
    else:
        lines.append("echo 'none of %s links %s'" % (", ".join([str(t.label) for t in ctx.attr.targets]), ", ".join(ctx.attr.forbidden)))
    ctx.actions.write(ctx.outputs.executable, "\n".join(lines) + "\n", is_executable = True)
    return [DefaultInfo(executable = ctx.outputs.executable)]

depcheck_test = rule(
    implementation = _depcheck_test_impl,
    doc = "Fails when any of targets depends, directly or not, on a label that starts with one of forbidden.",
    attrs = {
        "targets": attr.label_list(mandatory = True, aspects = [_collect], doc = "Go targets to check."),
        "forbidden": attr.string_list(mandatory = True, doc = "Label prefixes none of them may reach, e.g. //services/ or @gomod//sigs.k8s.io/kustomize/kyaml/."),
    },
    test = True,
)
