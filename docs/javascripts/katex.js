// Render the math that pymdownx.arithmatex (generic mode) leaves in the page, with the KaTeX
// copied into assets/katex by `qed docs` (no CDN). Material's `document$` also fires on
// instant navigation.
function qedRenderMath(root) {
  if (typeof renderMathInElement !== "function") return;
  renderMathInElement(root, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true }
    ],
    throwOnError: false
  });
}

if (typeof document$ !== "undefined") {
  document$.subscribe(({ body }) => qedRenderMath(body));
} else {
  document.addEventListener("DOMContentLoaded", () => qedRenderMath(document.body));
}
