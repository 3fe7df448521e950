---@mod saipling.related A side window with the passages related to the current file, following it.
--- :SaiplingRelatedWindow toggles it. It refreshes when you enter another buffer of a saipling filetype and when
--- indexing ends; <CR> opens the passage under the cursor in the window you came from, q closes it.
local M = {}

local group = vim.api.nvim_create_augroup("saipling_related", { clear = true })
local ns = vim.api.nvim_create_namespace("saipling_related")

---@class saipling.RelatedState
---@field buf integer?
---@field win integer?
---@field target string? the file shown
---@field results table[] rows, in order (line 3 onwards)
---@field root string?
---@field timer uv.uv_timer_t?
M.state = { results = {} }

local HEADER_LINES = 2

local function config()
  return require("saipling.config").options
end

function M.is_open()
  return M.state.win ~= nil and vim.api.nvim_win_is_valid(M.state.win)
end

--- One line per passage: `file § section · lines a–b · score`.
---@param item table
---@param root? string
function M.format(item, root)
  local picker = require("saipling.picker")
  local text = picker.format(item, root, { score = false })
  local lines = picker.lines(item)
  local score = tonumber(item.score)
  return ("%s · %s%s"):format(text, lines, score and (" · %.2f"):format(score) or "")
end

local function set_lines(lines)
  local buf = M.state.buf
  if not buf or not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(buf, ns, 0, -1)
  if #lines > 0 then
    vim.api.nvim_buf_add_highlight(buf, ns, "Title", 0, 0, -1)
  end
end

local function show(target, root, results, message)
  M.state.target, M.state.root, M.state.results = target, root, results or {}
  local shown = target and vim.fn.fnamemodify(target, ":~:.") or "?"
  if root and target and vim.startswith(target, root .. "/") then
    shown = target:sub(#root + 2)
  end
  local lines = { "Related to " .. shown, "" }
  for _, item in ipairs(M.state.results) do
    lines[#lines + 1] = M.format(item, root)
  end
  if message then
    lines[#lines + 1] = message
  end
  set_lines(lines)
end

--- Whether `bufnr` is a file buffer the plugin serves (not the related window itself).
local function is_source(bufnr)
  if bufnr == M.state.buf or vim.bo[bufnr].buftype ~= "" then
    return false
  end
  return vim.tbl_contains(config().filetypes or { "markdown" }, vim.bo[bufnr].filetype)
    and vim.api.nvim_buf_get_name(bufnr) ~= ""
end

--- Ask the server for the passages related to `bufnr` (default: the current buffer) and show them.
---@param bufnr? integer
---@param force? boolean refresh even when the same file is shown
function M.refresh(bufnr, force)
  if not M.is_open() then
    return
  end
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  if not is_source(bufnr) and M.state.target then
    bufnr = vim.fn.bufnr(M.state.target) -- e.g. indexing ended while the cursor is in the related window
  end
  if bufnr < 1 or not is_source(bufnr) then
    return
  end
  local fname = vim.fs.normalize(vim.api.nvim_buf_get_name(bufnr))
  if not force and fname == M.state.target and #M.state.results > 0 then
    return
  end
  local saipling = require("saipling")
  if not saipling.get_client(bufnr) then
    show(fname, nil, {}, "(no saipling server for this file; see :checkhealth saipling)")
    return
  end
  local params = { uri = vim.uri_from_fname(fname), maxResults = config().max_results }
  saipling.request("saipling/related", params, function(result, client)
    local results = result and result.results or {}
    show(fname, client.root_dir, results, #results == 0 and "(no related passages yet)" or nil)
  end, bufnr)
end

--- Refresh soon (debounced: moving through buffers sends one request).
function M.schedule(bufnr, force)
  local state = M.state
  if state.timer then
    state.timer:stop()
  else
    state.timer = vim.uv.new_timer()
  end
  state.timer:start(150, 0, vim.schedule_wrap(function()
    M.refresh(bufnr and vim.api.nvim_buf_is_valid(bufnr) and bufnr or nil, force)
  end))
end

--- Open the passage under the cursor in the window the user came from.
function M.open_under_cursor()
  local row = vim.api.nvim_win_get_cursor(0)[1] - HEADER_LINES
  local item = M.state.results[row]
  if not item then
    return
  end
  local root = M.state.root
  vim.cmd("wincmd p")
  if vim.api.nvim_get_current_win() == M.state.win then
    vim.cmd(config().related_window.position == "left" and "rightbelow vsplit" or "leftabove vsplit")
  end
  require("saipling.picker").open(item, root)
end

function M.close()
  if M.is_open() then
    vim.api.nvim_win_close(M.state.win, true)
  end
  M.state.win = nil
  vim.api.nvim_clear_autocmds({ group = group })
end

--- Open the window for the current file (or close it when open).
function M.toggle()
  if M.is_open() then
    M.close()
    return
  end
  local source = vim.api.nvim_get_current_buf()
  local source_win = vim.api.nvim_get_current_win()
  local buf = M.state.buf
  if not buf or not vim.api.nvim_buf_is_valid(buf) then
    buf = vim.api.nvim_create_buf(false, true)
    vim.api.nvim_buf_set_name(buf, "saipling://related")
    vim.bo[buf].bufhidden = "hide"
    vim.bo[buf].filetype = "saipling-related"
    vim.keymap.set("n", "<CR>", M.open_under_cursor, { buffer = buf, desc = "saipling: open passage" })
    vim.keymap.set("n", "q", M.close, { buffer = buf, desc = "saipling: close" })
    M.state.buf = buf
  end
  local wopts = config().related_window or {}
  local pos = wopts.position or "right"
  local split = pos == "left" and "topleft vsplit" or pos == "below" and "botright split" or "botright vsplit"
  vim.cmd(split)
  M.state.win = vim.api.nvim_get_current_win()
  vim.api.nvim_win_set_buf(M.state.win, buf)
  if wopts.size then
    if pos == "below" then
      vim.api.nvim_win_set_height(M.state.win, wopts.size)
    else
      vim.api.nvim_win_set_width(M.state.win, wopts.size)
    end
  end
  for opt, value in pairs({ number = false, relativenumber = false, wrap = false, cursorline = true, winfixwidth = true }) do
    vim.wo[M.state.win][opt] = value
  end
  vim.api.nvim_set_current_win(source_win)
  M.state.target, M.state.results = nil, {}
  show(nil, nil, {}, "(loading)")
  vim.api.nvim_create_autocmd("BufEnter", {
    group = group,
    callback = function(ev)
      if is_source(ev.buf) then
        M.schedule(ev.buf)
      end
    end,
  })
  -- Indexing ended: the current file's neighbours may have changed.
  vim.api.nvim_create_autocmd("LspProgress", {
    group = group,
    callback = function(ev)
      local client = vim.lsp.get_client_by_id(ev.data.client_id)
      local value = ev.data.params and ev.data.params.value or {}
      if client and client.name == require("saipling").name and value.kind == "end" then
        M.schedule(nil, true)
      end
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = tostring(M.state.win),
    callback = function()
      M.state.win = nil
      vim.api.nvim_clear_autocmds({ group = group })
    end,
  })
  M.refresh(source, true)
end

return M
