// Run in each page by measure_pages.py, once every diagram is drawn (open_page): measures
// what a reader sees at this window size and returns plain data.
(() => {
  const main = document.querySelector("main");
  if (!main) return { loaded: false };
  const column = main.getBoundingClientRect();
  const outside = (el) => el.closest(".column-margin, .column-page, .column-screen, nav");

  // How many characters of this element's monospace font fit across its content box.
  const charsThatFit = (pre) => {
    const probe = document.createElement("span");
    probe.textContent = "0".repeat(100);
    probe.style.whiteSpace = "pre";
    (pre.querySelector("code") || pre).appendChild(probe);
    const charWidth = probe.getBoundingClientRect().width / 100;
    probe.remove();
    const style = getComputedStyle(pre);
    const inner = pre.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
    return Math.floor(inner / charWidth + 0.001);
  };

  const columnsChars = [];
  const tooWide = [];
  const blocks = Array.from(main.querySelectorAll("pre")).filter(
    (pre) => !outside(pre) && pre.offsetParent);
  for (const pre of blocks) {
    const fit = charsThatFit(pre);
    columnsChars.push(fit);
    const scrollers = [pre, pre.querySelector("code"), pre.closest("div.sourceCode")];
    const scrolls = scrollers.some((el) => el && el.scrollWidth > el.clientWidth + 1);
    const spills = pre.getBoundingClientRect().right > column.right + 1;
    if (scrolls || spills) {
      const line = pre.textContent.split("\n").reduce((a, b) => (b.length > a.length ? b : a));
      tooWide.push(`${pre.closest(".cell-output") ? "output" : "code"} line of ` +
        `${line.length} characters, ${fit} fit: ${line.slice(0, 60)}`);
    }
  }
  // A box that scrolls sideways inside the column (a wide table or diagram on a phone)
  // holds what is wider than the column; the reader scrolls that box, not the page.
  const inScrollBox = (el) => {
    for (let box = el.parentElement; box && box !== main; box = box.parentElement)
      if (["auto", "scroll"].includes(getComputedStyle(box).overflowX) &&
          box.getBoundingClientRect().right <= column.right + 1) return true;
    return false;
  };
  // Code in a sentence that runs past the column (it should wrap: book.scss); in a table
  // that scrolls in its own box, it runs past with the table, and the reader scrolls that.
  for (const code of main.querySelectorAll(":not(pre) > code")) {
    if (outside(code) || !code.offsetParent || inScrollBox(code)) continue;
    // One box per line it takes up: wrapped code fits where each line does.
    const widest = Math.max(...Array.from(code.getClientRects(), (box) => box.right));
    if (widest > column.right + 1) {
      tooWide.push(`inline code to ${Math.round(widest - column.left)} px in a column of ` +
        `${Math.round(column.width)} px: ${code.textContent.slice(0, 60)}`);
    }
  }
  // Whatever the cause, a page wider than the window scrolls sideways as a whole.
  const pageWidth = document.documentElement.scrollWidth;
  if (pageWidth > window.innerWidth + 1) {
    tooWide.push(`the page is ${pageWidth} px wide in a window of ${window.innerWidth} px`);
  }
  for (const el of main.querySelectorAll("img, svg, table, math, mjx-container, .figure")) {
    if (outside(el) || el.closest("pre") || el.parentElement.closest("svg")) continue;
    if (inScrollBox(el)) continue;
    const box = el.getBoundingClientRect();
    if (box.right > column.right + 1 || box.left < column.left - 1) {
      tooWide.push(`${el.tagName.toLowerCase()} of ${Math.round(box.width)} px ` +
        `in a column of ${Math.round(column.width)} px`);
    }
  }

  // Colors as [r, g, b, a]; anything not rgb()/rgba() (a gradient, say) is null.
  const parseColor = (text) => {
    const match = /^rgba?\(([^)]+)\)$/.exec(text.trim());
    if (!match) return null;
    const parts = match[1].split(/[\s,/]+/).filter(Boolean).map(parseFloat);
    return [parts[0], parts[1], parts[2], parts.length > 3 ? parts[3] : 1];
  };
  const overWhite = ([r, g, b, a]) => [r, g, b].map((c) => c * a + 255 * (1 - a));
  const luminance = (rgb) => {
    const [r, g, b] = rgb.map((c) => {
      const s = c / 255;
      return s <= 0.03928 ? s / 12.92 : ((s + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const contrast = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const shapes = new Set(["rect", "path", "polygon", "circle", "ellipse"]);
  // The color painted behind a point of a diagram: the topmost filled shape or HTML
  // background under it, else the page's own background.
  const backgroundAt = (x, y, svg) => {
    for (const el of document.elementsFromPoint(x, y)) {
      if (el === svg) break;
      if (!svg.contains(el)) continue;
      const style = getComputedStyle(el);
      const paint = el instanceof SVGElement
        ? (shapes.has(el.tagName) ? parseColor(style.fill) : null)
        : parseColor(style.backgroundColor);
      if (paint && paint[3] > 0 && style.visibility !== "hidden" && style.opacity !== "0") {
        return overWhite(paint);
      }
    }
    return overWhite(parseColor(getComputedStyle(document.body).backgroundColor) || [255, 255, 255, 1]);
  };

  const diagrams = [];
  const labels = [];
  for (const svg of main.querySelectorAll("svg.diagram")) {
    const box = svg.getBoundingClientRect();
    const viewBox = svg.viewBox.baseVal;
    const report = {
      id: svg.id, scale: viewBox && viewBox.width ? box.width / viewBox.width : 1,
      opens_full_size: svg.classList.contains("diagram-open") && svg.tabIndex === 0,
      smallest_px: Infinity, smallest_text: "", lowest_contrast: Infinity,
      box: [box.left + window.scrollX, box.top + window.scrollY, box.width, box.height],
      cut_off: [],
    };
    // An HTML label taller than the box the diagram drew for it shows only its first lines.
    for (const label of svg.querySelectorAll("foreignObject")) {
      const content = label.firstElementChild;
      if (content && content.getBoundingClientRect().height >
          label.getBoundingClientRect().height + 1) {
        report.cut_off.push(label.textContent.trim().replace(/\s+/g, " ").slice(0, 40));
      }
    }
    const walker = document.createTreeWalker(svg, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const parent = node.parentElement;
      const text = node.textContent.trim();
      if (!text || parent.closest("style, defs, title, desc")) continue;
      const range = document.createRange();
      range.selectNodeContents(node);
      // elementsFromPoint sees only the viewport: bring the label to its middle first.
      const top = range.getBoundingClientRect().top + window.scrollY;
      window.scrollTo({ top: top - window.innerHeight / 2, behavior: "instant" });
      const rect = range.getBoundingClientRect();
      if (rect.width === 0 || rect.height === 0) continue;
      const anchor = parent.closest("foreignObject") || parent.closest("text") || parent;
      const ctm = anchor.getScreenCTM();
      const style = getComputedStyle(parent);
      const px = parseFloat(style.fontSize) * (ctm ? Math.hypot(ctm.a, ctm.b) : 1);
      if (px < report.smallest_px) {
        report.smallest_px = px;
        report.smallest_text = text.slice(0, 40);
      }
      const ink = parseColor(parent instanceof SVGElement ? style.fill : style.color);
      if (!ink) continue;
      const ratio = contrast(overWhite(ink),
        backgroundAt(rect.left + rect.width / 2, rect.top + rect.height / 2, svg));
      report.lowest_contrast = Math.min(report.lowest_contrast, ratio);
      labels.push({ diagram: svg.id, text: text.slice(0, 40), contrast: ratio });
    }
    diagrams.push(report);
  }
  return {
    loaded: true, viewport: window.innerWidth, column: [column.left, column.width],
    columns_chars: columnsChars, too_wide: tooWide, diagrams: diagrams, labels: labels,
  };
})()
