-- Put "Open on Binder" and "Open in Colab" links under the title of every chapter that is a
-- notebook, in HTML output. They open the chapter's reader notebook, notebooks/NAME.ipynb,
-- which scripts/build/readers.py writes from chapters/NAME.ipynb without Quarto's markup; Binder
-- opens it in JupyterLab. The repository and branch come from `book: repo-url` and
-- `book: repo-branch` in _quarto.yml, so the links follow wherever the book is published.
-- The URL forms are the ones scripts/checks/book_checks.py checks in README.md and index.qmd.

local function text(value)
  if value == nil then
    return nil
  end
  return pandoc.utils.stringify(value)
end

-- Percent-encode everything but unreserved characters: Binder's labpath is a query value.
local function encode(value)
  return (value:gsub("[^%w%-%._~]", function(char)
    return string.format("%%%02X", string.byte(char))
  end))
end

-- The path inside the repository of the reader notebook made from this chapter, e.g.
-- "notebooks/01_anatomy.ipynb" for chapters/01_anatomy.ipynb, or nil for a .qmd page.
local READERS_DIR = "notebooks"

local function reader_path()
  local input = quarto.doc.input_file
  if input == nil or not input:match("%.ipynb$") then
    return nil
  end
  return READERS_DIR .. "/" .. pandoc.path.filename(input)
end

function Pandoc(doc)
  if not quarto.doc.is_format("html") then
    return nil
  end
  local path = reader_path()
  if path == nil then
    return nil
  end
  local book = doc.meta.book or {}
  local repo = text(book["repo-url"])
  local slug = repo and repo:match("^https://github%.com/([^/]+/[^/]+)")
  if slug == nil then
    quarto.log.warning("launch-links: book: repo-url is not a GitHub address; no links for " .. path)
    return nil
  end
  slug = slug:gsub("%.git$", "")
  local branch = text(book["repo-branch"]) or "main"
  local binder = "https://mybinder.org/v2/gh/" .. slug .. "/" .. branch .. "?labpath=" .. encode(path)
  local colab = "https://colab.research.google.com/github/" .. slug .. "/blob/" .. branch .. "/" .. path
  local links = pandoc.Div(
    { pandoc.Para({
        pandoc.Link("Open on Binder", binder),
        pandoc.Space(), pandoc.Str("·"), pandoc.Space(),
        pandoc.Link("Open in Colab", colab),
      }) },
    pandoc.Attr("", { "launch-links" })
  )
  -- Under the chapter's title when the title is still the first block, else at the very top.
  local position = 1
  local first = doc.blocks[1]
  if first ~= nil and first.t == "Header" and first.level == 1 then
    position = 2
  end
  doc.blocks:insert(position, links)
  return doc
end
