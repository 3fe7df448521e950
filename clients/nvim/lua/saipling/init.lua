---@mod saipling Semantic search over markdown projects, through the saipling language server.
local config = require("saipling.config")

local M = {}

M.name = "saipling"
local group = vim.api.nvim_create_augroup("saipling", { clear = true })

--- Show a message from the plugin.
---@param msg string
---@param level? integer
local function notify(msg, level)
  vim.notify("saipling: " .. msg, level or vim.log.levels.INFO, { title = "saipling" })
end
M.notify = notify

--- Project root for a file, and how it was found.
--- The first of `root_markers` found upward (nearest one of that name) wins; the home folder itself never
--- counts. Without a marker, `root_fallback` decides ("cwd": the working directory when the file is under it).
---@param fname string absolute path
---@return string? root, string reason
function M.find_root(fname)
  local opts = config.options
  fname = vim.fs.normalize(fname)
  local dir = vim.fs.dirname(fname)
  local home = vim.fs.normalize(vim.uv.os_homedir() or "")
  for _, marker in ipairs(opts.root_markers or {}) do
    for _, found in ipairs(vim.fs.find(marker, { path = dir, upward = true, limit = math.huge })) do
      local root = vim.fs.dirname(found)
      if root ~= home then
        return root, "marker " .. marker
      end
    end
  end
  local fallback = opts.root_fallback
  if type(fallback) == "function" then
    local root = fallback(fname)
    return root and vim.fs.normalize(root) or nil, "root_fallback()"
  elseif fallback == "file" then
    return dir, "the file's folder (root_fallback = \"file\")"
  elseif fallback == "cwd" then
    local cwd = vim.fs.normalize(vim.fn.getcwd())
    if cwd == home or cwd == "/" then
      return nil, ("no root marker (%s) above the file, and the working directory is %s (never indexed whole)")
        :format(table.concat(opts.root_markers or {}, ", "), cwd == "/" and "/" or "your home folder")
    end
    if vim.startswith(fname, cwd .. "/") then
      return cwd, "the working directory (no root marker)"
    end
    return nil, ("no root marker (%s) above the file and it is not under the working directory %s"):format(
      table.concat(opts.root_markers or {}, ", "), cwd)
  end
  return nil, ("no root marker (%s) above the file"):format(table.concat(opts.root_markers or {}, ", "))
end

--- Project root for a file (see find_root), or nil.
---@param fname string absolute path
---@return string?
function M.root_dir(fname)
  return (M.find_root(fname))
end

--- The last error the plugin saw (a failed request, an error from the server), for :checkhealth.
---@type {msg: string, time: string}?
M.last_error = nil

local function record_error(msg)
  M.last_error = { msg = msg, time = os.date("%Y-%m-%d %H:%M:%S") }
end
M._record_error = record_error

--- Start the server for `bufnr` (or attach it to the running one for the same root).
---@param bufnr integer
---@return integer? client_id
function M.start(bufnr)
  local opts = config.options
  if vim.bo[bufnr].buftype ~= "" then
    return nil
  end
  local fname = vim.api.nvim_buf_get_name(bufnr)
  if fname == "" then
    return nil
  end
  fname = vim.fs.normalize(vim.fn.fnamemodify(fname, ":p"))
  if vim.fn.executable(opts.cmd[1]) ~= 1 then
    if not M._warned_missing then
      M._warned_missing = true
      notify(("server command %q not found; see :checkhealth saipling"):format(opts.cmd[1]), vim.log.levels.ERROR)
    end
    return nil
  end
  local root, reason = M.find_root(fname)
  if not root then
    M._no_root_warned = M._no_root_warned or {}
    local dir = vim.fs.dirname(fname)
    if not M._no_root_warned[dir] then
      M._no_root_warned[dir] = true
      notify(("no project root for %s: %s. :cd to the project, or add a project.json or .saipling folder at its root")
        :format(vim.fn.fnamemodify(fname, ":~"), reason), vim.log.levels.WARN)
    end
    return nil
  end
  local init_options = vim.tbl_deep_extend("force", opts.init_options or {}, opts.settings or {})
  local ok, id = pcall(vim.lsp.start, {
    name = M.name,
    cmd = opts.cmd,
    cmd_env = opts.cmd_env,
    root_dir = root,
    -- nil rather than {}: an empty Lua table is encoded as a JSON array
    init_options = not vim.tbl_isempty(init_options) and init_options or nil,
    settings = not vim.tbl_isempty(opts.settings or {}) and { saipling = opts.settings } or nil,
    on_attach = opts.on_attach,
    handlers = {
      -- Remember errors the server reports (for :checkhealth), then show them as usual.
      ["window/showMessage"] = function(err, result, ctx, cfg)
        if type(result) == "table" and result.type == vim.lsp.protocol.MessageType.Error then
          record_error(tostring(result.message))
        end
        return vim.lsp.handlers["window/showMessage"](err, result, ctx, cfg)
      end,
    },
  }, { bufnr = bufnr })
  if not ok then
    notify("could not start the server: " .. tostring(id), vim.log.levels.ERROR)
    return nil
  end
  return id
end

--- The saipling client for a buffer, else any running saipling client.
---@param bufnr? integer
---@return vim.lsp.Client?
function M.get_client(bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local clients = vim.lsp.get_clients({ name = M.name, bufnr = bufnr })
  if #clients == 0 then
    clients = vim.lsp.get_clients({ name = M.name })
  end
  return clients[1]
end

--- Send a request through the saipling client; `cb(result)` runs only on success.
--- Errors (no client, server error) are shown with vim.notify.
---@param method string
---@param params table
---@param cb? fun(result: any, client: vim.lsp.Client)
---@param bufnr? integer
---@return boolean sent
function M.request(method, params, cb, bufnr)
  bufnr = bufnr or vim.api.nvim_get_current_buf()
  local client = M.get_client(bufnr)
  if not client then
    notify("no server running; open a markdown file in a project (see :checkhealth saipling)", vim.log.levels.WARN)
    return false
  end
  local function handler(err, result)
    if err then
      local msg = ("%s failed: %s"):format(method, err.message or vim.inspect(err))
      record_error(msg)
      notify(msg, vim.log.levels.ERROR)
      return
    end
    if result == vim.NIL then
      result = nil
    end
    if cb then
      local ok, cb_err = pcall(cb, result, client)
      if not ok then
        notify(("%s: %s"):format(method, tostring(cb_err)), vim.log.levels.ERROR)
      end
    end
  end
  local req_bufnr = vim.api.nvim_buf_is_loaded(bufnr) and bufnr or nil
  local ok, sent
  if vim.fn.has("nvim-0.11") == 1 then
    ok, sent = pcall(client.request, client, method, params, handler, req_bufnr)
  else
    ok, sent = pcall(client.request, method, params, handler, req_bufnr)
  end
  if not ok or not sent then
    notify(("%s could not be sent: %s"):format(method, ok and "client is not running" or tostring(sent)),
      vim.log.levels.ERROR)
    return false
  end
  return true
end

--- Search the project; without `query`, ask for one. Opens the chosen result at its line.
--- The query may hold filter prefixes: `book:ID type:character,world upto:12 path:notes/` (see saipling.query).
--- `all_files` (`:SaiplingSearch!`): files `.context_settings.json` excludes are searched too (they are kept out of
--- agents' context, not out of your own searches).
---@param query? string
---@param opts? {filter?: table, all_files?: boolean}
function M.search(query, opts)
  local picker = require("saipling.picker")
  local q = require("saipling.query")
  local function run(text)
    if not text or vim.trim(text) == "" then
      return
    end
    local words, filter, errors = q.parse(text)
    filter = vim.tbl_extend("force", filter, opts and opts.filter or {})
    if #errors > 0 then
      notify(table.concat(errors, "; "), vim.log.levels.ERROR)
      return
    end
    if words == "" then
      -- Only filters: ask for the words, keeping the filters.
      vim.ui.input({ prompt = ("Saipling search (%s): "):format(q.describe(filter)) }, function(more)
        if more and vim.trim(more) ~= "" then
          M.search(more, { filter = filter, all_files = opts and opts.all_files })
        end
      end)
      return
    end
    local params = { query = words, maxResults = config.options.max_results, source = "editor", mode = config.options.mode }
    if next(filter) ~= nil then
      params.filter = filter
    end
    local all_files = opts and opts.all_files == true
    if all_files then
      params.respectContextSettings = false
    end
    M.request("saipling/search", params, function(result, client)
      local results = result and result.results or {}
      -- A settings file that could not be read (and what applies instead): said once per message.
      for _, w in ipairs(result and type(result.warnings) == "table" and result.warnings or {}) do
        vim.notify_once("saipling: " .. tostring(w), vim.log.levels.WARN, { title = "saipling" })
      end
      -- Filters, degraded (e.g. keyword-only) or still indexing: say so in the picker title.
      local notes = {}
      if next(filter) ~= nil then
        notes[#notes + 1] = q.describe(filter)
      end
      if all_files then
        notes[#notes + 1] = "excluded files too"
      end

      if result and type(result.degraded) == "string" and result.degraded ~= "" then
        notes[#notes + 1] = result.degraded
      end
      if result and result.indexing == true then
        notes[#notes + 1] = "indexing, results may be incomplete"
      end
      local title = "Saipling: " .. words .. (#notes > 0 and (" (" .. table.concat(notes, "; ") .. ")") or "")
      picker.pick(results, {
        title = title,
        root = client.root_dir,
        no_confident_match = result and result.noConfidentMatch == true or nil,
        note = result and type(result.note) == "string" and result.note or nil, -- why a filter left nothing
      })
    end)
  end
  if query and vim.trim(query) ~= "" then
    run(query)
  else
    vim.ui.input({ prompt = "Saipling search: " }, run)
  end
end

--- Completion for :SaiplingSearch (filter prefixes and their values).
---@param arglead string
---@return string[]
function M.complete_search(arglead)
  local client = M.get_client()
  local root = client and client.root_dir
  if not root then
    local name = vim.api.nvim_buf_get_name(0)
    root = name ~= "" and M.root_dir(name) or vim.fn.getcwd()
  end
  return require("saipling.query").complete(arglead, root, config.options.entity_types or {})
end

--- Passages from other files most similar to the current file, or (with `lines`, 1-based {first, last}) to the
--- passage at those lines: `:SaiplingRelated` for the file, `:.SaiplingRelated` or a visual range for a scene.
--- `all_files` (`:SaiplingRelated!`): files `.context_settings.json` excludes too, the current one included.
---@param lines? integer[]
---@param opts? {all_files?: boolean}
function M.related(lines, opts)
  local bufnr = vim.api.nvim_get_current_buf()
  local fname = vim.api.nvim_buf_get_name(bufnr)
  if fname == "" then
    notify("the current buffer has no file", vim.log.levels.WARN)
    return
  end
  local params = { uri = vim.uri_from_bufnr(bufnr), maxResults = config.options.max_results }
  local title = "Saipling related: " .. vim.fn.fnamemodify(fname, ":t")
  if opts and opts.all_files then
    params.respectContextSettings = false
    title = title .. " (excluded files too)"
  end
  if lines then
    params.startLine, params.endLine = lines[1], math.max(lines[1], lines[2] or lines[1])
    title = title .. ":" .. params.startLine .. (params.endLine > params.startLine and "-" .. params.endLine or "")
  end
  M.request("saipling/related", params, function(result, client)
    require("saipling.picker").pick(result and result.results or {}, { title = title, root = client.root_dir })
  end, bufnr)
end

--- Every mention of a character or place (its name and aliases) into the quickfix list, in manuscript order;
--- without `name`, the word under the cursor. The list's title is the entity's summary line.
---@param name? string
---@param opts? {open?: boolean, cb?: fun(items: table[], title: string)}
function M.mentions(name, opts)
  opts = opts or {}
  name = name and vim.trim(name) or ""
  if name == "" then
    name = vim.fn.expand("<cword>") -- (the apostrophe is no keyword character: `Mina's` gives Mina)
  end
  if name == "" then
    notify("usage: :SaiplingMentions NAME (or the cursor on a name)", vim.log.levels.WARN)
    return
  end
  M.request("saipling/mentions", { name = name, limit = 2000 }, function(result, client)
    local items, titles = {}, {}
    for _, e in ipairs(result and result.entities or {}) do
      titles[#titles + 1] = ("%s: %s"):format(e.entity.name, e.summary)
      local base = client.root_dir
      if type(e.workspaceFolder) == "string" then
        base = vim.uri_to_fname(e.workspaceFolder)
      end
      for _, m in ipairs(e.mentions or {}) do
        items[#items + 1] = {
          filename = vim.fs.joinpath(base, m.path),
          lnum = m.line,
          col = m.column + 1,
          end_col = m.endColumn + 1,
          text = ("%s%s · %s"):format(m.chapter ~= vim.NIL and m.chapter and (m.chapter .. ": ") or "", m.surface, e.entity.name),
        }
      end
    end
    local title = "Saipling mentions: " .. table.concat(titles, "; ")
    vim.fn.setqflist({}, " ", { title = title, items = items })
    if opts.cb then
      opts.cb(items, title)
    end
    if #items == 0 then
      notify(table.concat(titles, "; "))
    elseif opts.open ~= false then
      vim.cmd("botright copen")
    end
  end)
end

--- Reindex the project in the background (`full` rebuilds from scratch).
---@param full? boolean
function M.reindex(full)
  M.request("saipling/reindex", { full = full or false }, function()
    notify(full and "full reindex started" or "reindex started")
  end)
end

--- A JSON value, with null (vim.NIL) and "" as nil.
local function val(x)
  if x == vim.NIL or x == "" then
    return nil
  end
  return x
end

--- Format a `saipling/status` result as lines.
---@param s table
---@return string[]
function M.format_status(s)
  local model = val(s.model) and (" (" .. s.model .. ")") or ""
  local reason = val(s.providerReason) and (" - " .. s.providerReason) or ""
  local lines = {
    ("root:     %s"):format(val(s.root) or "?"),
    ("files:    %s   chunks: %s"):format(val(s.totalFiles) or 0, val(s.totalChunks) or 0),
    -- when the last run finished (embedding included), not when it last read a file
    ("indexed:  %s"):format(type(s.lastRun) == "table" and val(s.lastRun.finished) or val(s.lastIndexed) or "never"),
    ("provider: %s%s%s"):format(val(s.provider) or "?", model, reason),
  }
  if s.isIndexing == true then
    local p = type(s.progress) == "table" and s.progress or {}
    lines[#lines + 1] = ("indexing: %s/%s %s"):format(
      val(p.filesProcessed) or "?",
      val(p.filesTotal) or "?",
      val(p.currentFile) or ""
    )
  end
  local pending = val(s.pendingFiles)
  if pending and pending ~= 0 then
    lines[#lines + 1] = ("pending:  %s"):format(type(pending) == "table" and #pending or tostring(pending))
  end
  local excluded = val(s.excludedFiles)
  if excluded and excluded ~= 0 then
    lines[#lines + 1] = ("excluded: %s file(s) (.context_settings.json; :SaiplingSearch! reads them)"):format(excluded)
  end
  if val(s.degraded) then
    lines[#lines + 1] = ("degraded: %s"):format(tostring(s.degraded))
  end
  for _, w in ipairs(type(s.warnings) == "table" and s.warnings or {}) do
    lines[#lines + 1] = "warning:  " .. tostring(w)
  end
  return lines
end

--- Show the index status; with `cb`, pass the raw result to it instead.
---@param cb? fun(status: table)
function M.status(cb)
  M.request("saipling/status", vim.empty_dict(), function(result)
    if cb then
      cb(result)
    else
      notify("status\n" .. table.concat(M.format_status(result or {}), "\n"))
    end
  end)
end

--- Drop the whole index (rebuilt by the next reindex).
function M.clear_index()
  M.request("saipling/clearIndex", vim.empty_dict(), function()
    notify("index cleared")
  end)
end

--- Echo `$/progress` of the saipling client in the message area.
---@param ev table LspProgress autocmd event
local function on_progress(ev)
  local client = vim.lsp.get_client_by_id(ev.data.client_id)
  if not client or client.name ~= M.name then
    return
  end
  local value = ev.data.params and ev.data.params.value or {}
  local msg
  if value.kind == "end" then
    msg = "saipling: " .. (value.message or "indexing done")
  else
    msg = ("saipling: %s%s%s"):format(
      value.title or "Indexing",
      value.message and (" " .. value.message) or "",
      value.percentage and (" (%d%%)"):format(value.percentage) or ""
    )
  end
  vim.api.nvim_echo({ { msg } }, false, {})
end

--- Configure the plugin and start the server for matching buffers.
---@param opts? saipling.Config
function M.setup(opts)
  config.setup(opts)
  M._warned_missing = false
  vim.api.nvim_clear_autocmds({ group = group })
  vim.api.nvim_create_autocmd("FileType", {
    group = group,
    pattern = config.options.filetypes,
    callback = function(ev)
      M.start(ev.buf)
    end,
  })
  if config.options.progress then
    vim.api.nvim_create_autocmd("LspProgress", { group = group, callback = on_progress })
  end
  -- Buffers already open when setup() runs (lazy loading on ft=markdown).
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_is_loaded(buf) and vim.tbl_contains(config.options.filetypes, vim.bo[buf].filetype) then
      M.start(buf)
    end
  end
  M._setup_done = true
end

return M
