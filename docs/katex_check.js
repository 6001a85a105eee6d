#!/usr/bin/env node
// Render formulas with KaTeX and report every one that does not parse (used by
// tests/test_docs.py). Input on stdin: JSON [{"expr": "...", "display": true, "where": "file:line"}].
// Output on stdout: JSON {"katex": version, "checked": n, "errors": [{"where", "expr", "error"}]}.
// Needs the npm `katex` package on NODE_PATH (e.g. build/node/node_modules, see .ci/run).
"use strict";
const katex = require("katex");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const items = JSON.parse(input || "[]");
  const errors = [];
  for (const item of items) {
    try {
      katex.renderToString(item.expr, { throwOnError: true, displayMode: !!item.display, strict: "ignore" });
    } catch (e) {
      errors.push({ where: item.where, expr: item.expr, error: String(e && e.message ? e.message : e) });
    }
  }
  process.stdout.write(JSON.stringify({ katex: katex.version, checked: items.length, errors }) + "\n");
});
