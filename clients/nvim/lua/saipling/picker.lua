---@mod saipling.picker Show search results in Telescope, fzf-lua, snacks or vim.ui.select.
local M = {}

local function notify(msg, level)
  vim.notify("saipling: " .. msg, level or vim.log.levels.INFO, { title = "saipling" })
end

local function present(v)
  return v ~= nil and v ~= vim.NIL and v ~= ""
end

--- Absolute path and 1-based line of a result.
---@param item table search result
---@param root? string project root, for a relative filePath
---@return string? fname, integer line
function M.location(item, root)
  local fname
  if present(item.uri) then
    fname = vim.uri_to_fname(item.uri)
  elseif present(item.filePath) then
    fname = item.filePath
    if root and not vim.startswith(fname, "/") and not fname:match("^%a:[/\\]") then
      fname = vim.fs.joinpath(root, fname)
    end
  end
  local line = tonumber(item.startLine)
  if not line and type(item.range) == "table" and type(item.range.start) == "table" then
    line = tonumber(item.range.start.line) and item.range.start.line + 1
  end
  return fname, math.max(1, line or 1)
end

--- `lines a–b` (or `line a`) of a result.
---@param item table search result
---@return string
function M.lines(item)
  local _, first = M.location(item, nil)
  local last = tonumber(item.endLine) or first
  return last > first and ("lines %d–%d"):format(first, last) or ("line %d"):format(first)
end

--- The result's text on one line, cut to `max` characters: its snippet (the text around the matched words),
--- else its preview (the passage's first words, which may not show why it matched).
---@param item table search result
---@param max? integer
---@return string
function M.snippet(item, max)
  max = max or 80
  local text = present(item.snippet) and item.snippet or present(item.preview) and item.preview or ""
  text = tostring(text):gsub("</?[bB]>", ""):gsub("</?mark>", ""):gsub("%*%*", ""):gsub("%s+", " ")
  text = vim.trim(text)
  if vim.fn.strchars(text) > max then
    text = vim.fn.strcharpart(text, 0, max - 1) .. "…"
  end
  return text
end

--- Results whose own confidence is under this are "low confidence", as the CLI shows them (the server's
--- noConfidentMatch bar).
M.low_confidence_below = 0.5

--- True when the result's own confidence (its evidence: cosine, words) is under the bar; without one, its score.
--- Not the score alone: that is relative to the best result, and a scene under a bible note that sums it up
--- scored 0.39 while its own confidence was 0.9.
---@param item table search result
---@return boolean
function M.low_confidence(item)
  local own = tonumber(item.confidence) or tonumber(item.score)
  return own ~= nil and own < M.low_confidence_below
end

--- The vim.ui.select row: `file § section · lines a–b · score · snippet`.
---@param item table search result
---@param root? string
---@return string
function M.format_select(item, root)
  local parts = { M.format(item, root, { score = false }), M.lines(item) }
  if tonumber(item.score) then
    parts[#parts + 1] = ("%.2f"):format(item.score) .. (M.low_confidence(item) and " (low confidence)" or "")
  end
  local snippet = M.snippet(item)
  if snippet ~= "" then
    parts[#parts + 1] = snippet
  end
  return table.concat(parts, " · ")
end

--- `file § section  score`, the file relative to the project root.
---@param item table search result
---@param root? string
---@param opts? {score?: boolean} score = false leaves the score out
---@return string
function M.format(item, root, opts)
  local fname = M.location(item, root) or "?"
  local shown = present(item.filePath) and item.filePath or fname
  if root and vim.startswith(shown, root .. "/") then
    shown = shown:sub(#root + 2)
  end
  local section = item.sectionHeading
  if not present(section) then
    -- headingPath: "Top > Inner" (or a list of headings)
    local path = item.headingPath
    if type(path) == "table" then
      section = path[#path]
    elseif present(path) then
      section = vim.split(path, " > ", { plain = true })
      section = section[#section]
    end
  end
  local text = shown
  if present(section) then
    text = text .. " § " .. section:gsub("^#+%s*", "")
  end
  if tonumber(item.score) and not (opts and opts.score == false) then
    text = ("%s  %.2f"):format(text, item.score) .. (M.low_confidence(item) and " (low confidence)" or "")
  end
  return text
end

--- Open a result's file and put the cursor on its first line.
---@param item table search result
---@param root? string
function M.open(item, root)
  local fname, line = M.location(item, root)
  if not fname then
    notify("result has no file", vim.log.levels.WARN)
    return
  end
  local ok, err = pcall(vim.cmd.edit, vim.fn.fnameescape(fname))
  if not ok then
    notify("could not open " .. fname .. ": " .. tostring(err), vim.log.levels.ERROR)
    return
  end
  line = math.min(line, vim.api.nvim_buf_line_count(0))
  vim.api.nvim_win_set_cursor(0, { line, 0 })
  vim.cmd("normal! zvzz")
end

--- Name of the picker to use: the configured one if installed, else the first installed.
---@param wanted? string "auto"|"telescope"|"fzf-lua"|"snacks"|"select"
---@param quiet? boolean do not warn when the wanted picker is missing
---@return "telescope"|"fzf-lua"|"snacks"|"select"
function M.resolve(wanted, quiet)
  local available = {
    telescope = function()
      return (pcall(require, "telescope"))
    end,
    ["fzf-lua"] = function()
      return (pcall(require, "fzf-lua"))
    end,
    snacks = function()
      local ok, snacks = pcall(require, "snacks")
      return ok and type(snacks) == "table" and snacks.picker ~= nil
    end,
  }
  wanted = wanted or "auto"
  if wanted == "select" then
    return "select"
  end
  if wanted ~= "auto" then
    if available[wanted] and available[wanted]() then
      return wanted
    end
    if not quiet then
      notify(("picker %q is not installed; using vim.ui.select"):format(wanted), vim.log.levels.WARN)
    end
    return "select"
  end
  for _, name in ipairs({ "telescope", "fzf-lua", "snacks" }) do
    if available[name]() then
      return name
    end
  end
  return "select"
end

local backends = {}

function backends.select(items, opts, open)
  vim.ui.select(items, {
    prompt = opts.title,
    kind = "saipling",
    format_item = function(item)
      return M.format_select(item, opts.root)
    end,
  }, function(choice)
    if choice then
      open(choice)
    end
  end)
end

function backends.telescope(items, opts, open)
  local pickers = require("telescope.pickers")
  local finders = require("telescope.finders")
  local conf = require("telescope.config").values
  local actions = require("telescope.actions")
  local action_state = require("telescope.actions.state")
  pickers
    .new({}, {
      prompt_title = opts.title,
      finder = finders.new_table({
        results = items,
        entry_maker = function(item)
          local fname, line = M.location(item, opts.root)
          local display = M.format(item, opts.root)
          return { value = item, display = display, ordinal = display, filename = fname, lnum = line }
        end,
      }),
      sorter = conf.generic_sorter({}),
      previewer = conf.grep_previewer({}),
      attach_mappings = function(prompt_bufnr)
        actions.select_default:replace(function()
          local entry = action_state.get_selected_entry()
          actions.close(prompt_bufnr)
          if entry then
            open(entry.value)
          end
        end)
        return true
      end,
    })
    :find()
end

function backends.fzf_lua(items, opts, open)
  local lines, by_line = {}, {}
  for i, item in ipairs(items) do
    local line = ("%d. %s"):format(i, M.format(item, opts.root))
    lines[i] = line
    by_line[line] = item
  end
  require("fzf-lua").fzf_exec(lines, {
    prompt = opts.title .. "> ",
    actions = {
      ["default"] = function(selected)
        local item = selected and by_line[selected[1]]
        if item then
          open(item)
        end
      end,
    },
  })
end

function backends.snacks(items, opts, open)
  local entries = {}
  for i, item in ipairs(items) do
    local fname, line = M.location(item, opts.root)
    entries[i] = { idx = i, text = M.format(item, opts.root), file = fname, pos = { line, 0 }, result = item }
  end
  require("snacks").picker.pick({
    title = opts.title,
    items = entries,
    format = function(entry)
      return { { entry.text } }
    end,
    preview = "file",
    confirm = function(picker, entry)
      picker:close()
      if entry then
        open(entry.result)
      end
    end,
  })
end
backends["fzf-lua"] = backends.fzf_lua

--- Let the user pick one of `results` and jump to it. With `no_confident_match` (the server's
--- noConfidentMatch: no result reaches the confidence bar) the title and a notification say so.
---@param results table[] search results
--- With no results, `note` (the server's: why a filter left nothing) is said with "no results".
---@param opts? {title?: string, root?: string, picker?: string, no_confident_match?: boolean, note?: string}
function M.pick(results, opts)
  opts = opts or {}
  opts.title = opts.title or "Saipling"
  if not results or #results == 0 then
    notify("no results" .. (present(opts.note) and (": " .. opts.note) or ""), vim.log.levels.INFO)
    return
  end
  local none_confident = opts.no_confident_match
  if none_confident == nil then -- not told: no result reaches the bar
    none_confident = #vim.tbl_filter(function(item)
      return tonumber(item.score) ~= nil and not M.low_confidence(item)
    end, results) == 0 and #vim.tbl_filter(M.low_confidence, results) > 0
  end
  if none_confident then
    opts.title = opts.title .. " (no confident match)"
    notify("nothing matched confidently: these are the closest passages, low confidence", vim.log.levels.INFO)
  end
  local name = M.resolve(opts.picker or require("saipling.config").options.picker)
  local function open(item)
    M.open(item, opts.root)
  end
  local ok, err = pcall(backends[name], results, opts, open)
  if not ok and name ~= "select" then
    notify(name .. " picker failed (" .. tostring(err) .. "); using vim.ui.select", vim.log.levels.WARN)
    ok, err = pcall(backends.select, results, opts, open)
  end
  if not ok then
    notify("picker failed: " .. tostring(err), vim.log.levels.ERROR)
  end
end

return M
